//! A UDP load generator for loss measurements: paced queries from several source sockets (so
//! `SO_REUSEPORT` spreads them over every worker), each query tracked by its socket and id until
//! answered, with every answer's latency kept (so a window around an event, a crash say, can be
//! compared with the steady state). Bounded in count and in time; loopback only by intent (the caller picks the
//! server, tests and benchmarks use 127.0.0.1).

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

use crate::dns;

/// Receive buffer of each source socket.
const CLIENT_RECEIVE_BUFFER: usize = 8 << 20;

/// What to send.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub server: SocketAddr,
    /// Queries per second.
    pub rate: u32,
    /// Hard bound on the number of queries.
    pub max_queries: u64,
    /// Hard bound on the sending time.
    pub max_duration: Duration,
    /// Source sockets (source ports), used round-robin.
    pub sockets: usize,
    pub qname: String,
    pub qtype: u16,
    /// How long an unanswered query is waited for after the last one was sent.
    pub answer_timeout: Duration,
}

impl LoadSpec {
    /// `rate` queries per second of `qname`/A to `server`, at most 120 s (and 2^20 queries).
    pub fn new(server: SocketAddr, rate: u32, qname: &str) -> Self {
        LoadSpec {
            server,
            rate,
            // Ids stay unique per socket (65536 per socket, 16 sockets).
            max_queries: (u64::from(rate) * 120).min(65536 * 16),
            max_duration: Duration::from_secs(120),
            sockets: 16,
            qname: qname.to_owned(),
            qtype: dns::TYPE_A,
            answer_timeout: Duration::from_secs(5),
        }
    }
}

/// The outcome.
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    pub sent: u64,
    pub answered: u64,
    /// Answers with an rcode other than NOERROR (counted in `answered` too).
    pub errors: u64,
    /// Sends the kernel refused (e.g. ECONNREFUSED after an ICMP port unreachable: nothing was
    /// listening); those queries are lost.
    pub send_failures: u64,
    /// Sent, never answered within `answer_timeout` after the end.
    pub lost: u64,
    /// When each lost query was sent, from the start of the load.
    pub lost_at: Vec<Duration>,
    pub max_latency: Duration,
    pub elapsed: Duration,
    /// Every answer, by send time.
    pub answers: Vec<Answered>,
}

/// One answered query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answered {
    /// When it was sent, from the start of the load.
    pub sent_at: Duration,
    /// How long its answer took.
    pub latency: Duration,
}

/// Latency of the answers to the queries sent in a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Percentiles {
    pub count: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub p999: Duration,
    pub max: Duration,
}

impl std::fmt::Display for Percentiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} answers: p50 {:.2?}, p99 {:.2?}, p99.9 {:.2?}, max {:.2?}",
            self.count, self.p50, self.p99, self.p999, self.max
        )
    }
}

impl std::fmt::Display for LoadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "sent {} in {:.1?} ({:.0}/s), answered {} ({} errors), lost {} ({} send failures), max latency {:.1?}",
            self.sent,
            self.elapsed,
            self.rate(),
            self.answered,
            self.errors,
            self.lost,
            self.send_failures,
            self.max_latency
        )?;
        let bursts = self.loss_bursts(Duration::from_millis(50));
        if !bursts.is_empty() {
            write!(f, ", losses (sent at, count):")?;
            for (at, n) in bursts.iter().take(20) {
                write!(f, " {at:.3?}x{n}")?;
            }
        }
        Ok(())
    }
}

impl LoadReport {
    /// Lost queries grouped into bursts separated by more than `gap`: (first send time, count).
    pub fn loss_bursts(&self, gap: Duration) -> Vec<(Duration, u64)> {
        let mut out: Vec<(Duration, u64)> = Vec::new();
        let mut last: Option<Duration> = None;
        for &at in &self.lost_at {
            match (last, out.last_mut()) {
                (Some(prev), Some(burst)) if at - prev <= gap => burst.1 += 1,
                _ => out.push((at, 1)),
            }
            last = Some(at);
        }
        out
    }

    /// Latency percentiles of the answers to the queries sent in `from..to` (from the start of
    /// the load); `None` when none was answered.
    pub fn latency(&self, from: Duration, to: Duration) -> Option<Percentiles> {
        let mut l: Vec<Duration> = self
            .answers
            .iter()
            .filter(|a| a.sent_at >= from && a.sent_at < to)
            .map(|a| a.latency)
            .collect();
        l.sort_unstable();
        let last = l.len().checked_sub(1)?;
        // Nearest rank: the smallest latency at least `q` of the answers do not exceed.
        let at = |q: f64| {
            l[((q * l.len() as f64).ceil() as usize)
                .saturating_sub(1)
                .min(last)]
        };
        Some(Percentiles {
            count: l.len(),
            p50: at(0.50),
            p99: at(0.99),
            p999: at(0.999),
            max: l[last],
        })
    }

    /// Achieved rate, queries per second.
    pub fn rate(&self) -> f64 {
        self.sent as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Per source socket: send time of each outstanding id.
struct Pending {
    slots: Mutex<Vec<Option<Instant>>>,
}

struct Shared {
    start: Instant,
    stop_sending: AtomicBool,
    stop_receiving: AtomicBool,
    sent: AtomicU64,
    answered: AtomicU64,
    errors: AtomicU64,
    send_failures: AtomicU64,
    max_latency_us: AtomicU64,
    pending: Vec<Pending>,
    /// Per source socket (one receiver each, so no contention): (sent at, latency) of every
    /// answer, in microseconds.
    answers: Vec<Mutex<Vec<(u32, u32)>>>,
}

/// Load running in background threads.
pub struct Load {
    shared: Arc<Shared>,
    spec: LoadSpec,
    sender: JoinHandle<()>,
    receivers: Vec<JoinHandle<()>>,
}

impl Load {
    pub fn start(spec: LoadSpec) -> Result<Load> {
        ensure!(spec.sockets > 0 && spec.rate > 0, "empty load");
        ensure!(
            spec.max_queries <= 65536 * spec.sockets as u64,
            "ids would repeat: at most 65536 queries per socket"
        );
        let local: SocketAddr = if spec.server.is_ipv4() {
            "127.0.0.1:0".parse()?
        } else {
            "[::1]:0".parse()?
        };
        let mut sockets = Vec::new();
        for _ in 0..spec.sockets {
            let s = UdpSocket::bind(local)?;
            s.connect(spec.server)?;
            // A restarted worker answers its whole queue in one burst: room for it, so the
            // client's own buffer never counts as the server's loss (forced past rmem_max when
            // we may).
            let forced = nix::sys::socket::setsockopt(
                &s,
                nix::sys::socket::sockopt::RcvBufForce,
                &CLIENT_RECEIVE_BUFFER,
            );
            if forced.is_err() {
                nix::sys::socket::setsockopt(
                    &s,
                    nix::sys::socket::sockopt::RcvBuf,
                    &CLIENT_RECEIVE_BUFFER,
                )?;
            }
            s.set_read_timeout(Some(Duration::from_millis(20)))?;
            sockets.push(Arc::new(s));
        }
        let shared = Arc::new(Shared {
            start: Instant::now(),
            stop_sending: AtomicBool::new(false),
            stop_receiving: AtomicBool::new(false),
            sent: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            send_failures: AtomicU64::new(0),
            max_latency_us: AtomicU64::new(0),
            pending: (0..spec.sockets)
                .map(|_| Pending {
                    slots: Mutex::new(vec![None; 65536]),
                })
                .collect(),
            answers: (0..spec.sockets).map(|_| Mutex::new(Vec::new())).collect(),
        });
        let mut receivers = Vec::new();
        for (i, s) in sockets.iter().enumerate() {
            let (s, shared) = (s.clone(), shared.clone());
            receivers.push(std::thread::spawn(move || receive(&s, &shared, i)));
        }
        let queries: Vec<Vec<u8>> = (0..=u16::MAX)
            .map(|id| dns::encode_query(id, &spec.qname, spec.qtype, false))
            .collect::<Result<_>>()
            .context("encoding queries")?;
        let sender = {
            let (shared, spec) = (shared.clone(), spec.clone());
            std::thread::spawn(move || send(&sockets, &queries, &shared, &spec))
        };
        Ok(Load {
            shared,
            spec,
            sender,
            receivers,
        })
    }

    /// Queries sent so far.
    pub fn sent(&self) -> u64 {
        self.shared.sent.load(Ordering::Relaxed)
    }

    /// Time since the load started (the origin of [`LoadReport::lost_at`]).
    pub fn elapsed(&self) -> Duration {
        self.shared.start.elapsed()
    }

    /// Answers received so far.
    pub fn answered(&self) -> u64 {
        self.shared.answered.load(Ordering::Relaxed)
    }

    /// Wait until `n` more answers than now arrived, or `timeout`.
    pub fn wait_answers(&self, n: u64, timeout: Duration) -> bool {
        let target = self.answered() + n;
        let t0 = Instant::now();
        while t0.elapsed() < timeout {
            if self.answered() >= target {
                return true;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        false
    }

    /// Stop sending, wait for the outstanding answers (at most `answer_timeout`), report.
    pub fn stop(self) -> LoadReport {
        self.shared.stop_sending.store(true, Ordering::SeqCst);
        let _ = self.sender.join();
        let elapsed = self.shared.start.elapsed();
        let deadline = Instant::now() + self.spec.answer_timeout;
        while Instant::now() < deadline && outstanding(&self.shared) > 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.shared.stop_receiving.store(true, Ordering::SeqCst);
        for r in self.receivers {
            let _ = r.join();
        }
        let mut lost_at = Vec::new();
        for p in &self.shared.pending {
            let slots = p.slots.lock().unwrap_or_else(|e| e.into_inner());
            lost_at.extend(slots.iter().flatten().map(|t| *t - self.shared.start));
        }
        lost_at.sort_unstable();
        let mut answers: Vec<Answered> = Vec::new();
        for a in &self.shared.answers {
            let a = a.lock().unwrap_or_else(|e| e.into_inner());
            answers.extend(a.iter().map(|&(sent, latency)| Answered {
                sent_at: Duration::from_micros(sent.into()),
                latency: Duration::from_micros(latency.into()),
            }));
        }
        answers.sort_unstable_by_key(|a| a.sent_at);
        let s = &self.shared;
        LoadReport {
            sent: s.sent.load(Ordering::SeqCst),
            answered: s.answered.load(Ordering::SeqCst),
            errors: s.errors.load(Ordering::SeqCst),
            send_failures: s.send_failures.load(Ordering::SeqCst),
            lost: lost_at.len() as u64,
            lost_at,
            max_latency: Duration::from_micros(s.max_latency_us.load(Ordering::SeqCst)),
            elapsed,
            answers,
        }
    }
}

fn outstanding(shared: &Shared) -> usize {
    shared
        .pending
        .iter()
        .map(|p| {
            let slots = p.slots.lock().unwrap_or_else(|e| e.into_inner());
            slots.iter().flatten().count()
        })
        .sum()
}

fn send(sockets: &[Arc<UdpSocket>], queries: &[Vec<u8>], shared: &Shared, spec: &LoadSpec) {
    let n = sockets.len() as u64;
    let mut seq: u64 = 0;
    while seq < spec.max_queries && !shared.stop_sending.load(Ordering::Relaxed) {
        let elapsed = shared.start.elapsed();
        if elapsed > spec.max_duration {
            break;
        }
        let due = ((elapsed.as_secs_f64() * f64::from(spec.rate)) as u64).min(spec.max_queries);
        while seq < due {
            let socket = (seq % n) as usize;
            let id = ((seq / n) % 65536) as usize;
            shared.pending[socket]
                .slots
                .lock()
                .unwrap_or_else(|e| e.into_inner())[id] = Some(Instant::now());
            if sockets[socket].send(&queries[id]).is_err() {
                shared.send_failures.fetch_add(1, Ordering::Relaxed);
            }
            shared.sent.fetch_add(1, Ordering::Relaxed);
            seq += 1;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

fn receive(socket: &UdpSocket, shared: &Shared, index: usize) {
    let mut buf = [0u8; 4096];
    while !shared.stop_receiving.load(Ordering::Relaxed) {
        // Timeouts, and ECONNREFUSED while nothing listens, are not answers.
        let Ok(len) = socket.recv(&mut buf) else {
            continue;
        };
        if len < 12 {
            continue;
        }
        let id = usize::from(u16::from_be_bytes([buf[0], buf[1]]));
        let sent_at = shared.pending[index]
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())[id]
            .take();
        let Some(sent_at) = sent_at else { continue };
        let latency = u64::try_from(sent_at.elapsed().as_micros()).unwrap_or(u64::MAX);
        shared.max_latency_us.fetch_max(latency, Ordering::Relaxed);
        let since_start = sent_at.saturating_duration_since(shared.start).as_micros();
        shared.answers[index]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((
                u32::try_from(since_start).unwrap_or(u32::MAX),
                u32::try_from(latency).unwrap_or(u32::MAX),
            ));
        shared.answered.fetch_add(1, Ordering::Relaxed);
        if buf[3] & 0x0f != dns::RCODE_NOERROR {
            shared.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(latencies_ms: &[(u64, u64)]) -> LoadReport {
        LoadReport {
            answers: latencies_ms
                .iter()
                .map(|&(sent, latency)| Answered {
                    sent_at: Duration::from_millis(sent),
                    latency: Duration::from_millis(latency),
                })
                .collect(),
            ..LoadReport::default()
        }
    }

    #[test]
    fn percentiles_are_nearest_ranks_within_the_window() {
        // 100 answers sent at 0..100 ms with latencies 1..=100 ms, and one outside the window.
        let mut rows: Vec<(u64, u64)> = (0..100).map(|i| (i, i + 1)).collect();
        rows.push((500, 1000));
        let r = report(&rows);
        let p = r
            .latency(Duration::ZERO, Duration::from_millis(100))
            .expect("answers");
        assert_eq!(p.count, 100);
        assert_eq!(p.p50, Duration::from_millis(50));
        assert_eq!(p.p99, Duration::from_millis(99));
        assert_eq!(p.p999, Duration::from_millis(100));
        assert_eq!(p.max, Duration::from_millis(100));
        let all = r
            .latency(Duration::ZERO, Duration::from_secs(1))
            .expect("answers");
        assert_eq!(all.max, Duration::from_millis(1000));
        assert_eq!(
            r.latency(Duration::from_secs(2), Duration::from_secs(3)),
            None
        );
    }
}
