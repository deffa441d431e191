//! A closed-loop UDP load at saturation, shared by the benchmarks that measure throughput:
//! several sockets, each keeping a window of queries in flight and sending a new one for every
//! answer, counted after a warm-up; and the CPU time kresd spent meanwhile (its main thread's,
//! from `/proc/PID/schedstat`).

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

/// Load threads, each with one socket.
pub const THREADS: usize = 2;

/// Queries each socket keeps in flight.
pub const WINDOW: usize = 64;

/// Not counted at the start of a burst.
pub const WARM_UP: Duration = Duration::from_millis(500);

/// How long a socket waits for an answer before it refills its window.
const ANSWER_WAIT: Duration = Duration::from_millis(200);

/// A resolver a burst loads.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// Its name in messages.
    pub label: &'a str,
    /// Its DNS address.
    pub server: SocketAddr,
    /// Its only kresd.
    pub kresd: i32,
}

/// What one load thread saw after the warm-up.
#[derive(Debug, Default, Clone, Copy)]
struct Counted {
    /// Answers received.
    answers: u64,
    /// Answers with another rcode than NOERROR.
    errors: u64,
    /// Windows refilled after a wait with no answer.
    refills: u64,
}

/// One thread of the closed loop: `WINDOW` queries of `qname` in flight on its own socket
/// until `until`; counts what arrives after `count_from`.
fn load_thread(
    server: SocketAddr,
    qname: &str,
    count_from: Instant,
    until: Instant,
) -> Result<Counted> {
    let sock = UdpSocket::bind("127.0.0.1:0")?;
    sock.connect(server)?;
    sock.set_read_timeout(Some(ANSWER_WAIT))?;
    let mut query = testbed::dns::encode_query(0, qname, testbed::dns::TYPE_A, false)?;
    let mut id: u16 = 0;
    let mut send = |sock: &UdpSocket| -> Result<()> {
        id = id.wrapping_add(1);
        query[..2].copy_from_slice(&id.to_be_bytes());
        sock.send(&query).context("send")?;
        Ok(())
    };
    for _ in 0..WINDOW {
        send(&sock)?;
    }
    let mut counted = Counted::default();
    let mut buf = [0u8; 512];
    while Instant::now() < until {
        match sock.recv(&mut buf) {
            Ok(n) if n >= 12 => {
                if Instant::now() >= count_from {
                    counted.answers += 1;
                    if buf[3] & 0x0f != 0 {
                        counted.errors += 1;
                    }
                }
                send(&sock)?;
            }
            Ok(_) => send(&sock)?,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                counted.refills += 1;
                for _ in 0..WINDOW {
                    send(&sock)?;
                }
            }
            Err(e) => return Err(e).context("recv"),
        }
    }
    Ok(counted)
}

/// CPU time of process `pid`'s main thread so far (`/proc/PID/schedstat`; kresd answers on
/// its main thread).
pub fn cpu_time(pid: i32) -> Result<Duration> {
    let schedstat = std::fs::read_to_string(format!("/proc/{pid}/schedstat"))?;
    let ns: u64 = schedstat
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .context("schedstat")?;
    Ok(Duration::from_nanos(ns))
}

/// One burst's outcome for one target.
#[derive(Debug, Clone, Copy)]
pub struct Burst {
    /// Answers counted.
    pub answers: u64,
    /// Answers per second (wall clock).
    pub qps: f64,
    /// kresd's CPU time per answer, in microseconds.
    pub cpu_us: f64,
}

/// One burst of `seconds` (after the warm-up) of queries for `qname` against every target at
/// once, [`THREADS`] load threads shared among them; each one's outcome. Every answer must be
/// NOERROR.
pub fn burst(targets: &[Target<'_>], qname: &str, seconds: f64) -> Result<Vec<Burst>> {
    let start = Instant::now();
    let count_from = start + WARM_UP;
    let until = count_from + Duration::from_secs_f64(seconds);
    let per_target = (THREADS / targets.len()).max(1);
    let threads: Vec<Vec<_>> = targets
        .iter()
        .map(|t| {
            let server = t.server;
            (0..per_target)
                .map(|_| {
                    let qname = qname.to_owned();
                    std::thread::spawn(move || load_thread(server, &qname, count_from, until))
                })
                .collect()
        })
        .collect();
    std::thread::sleep(count_from.saturating_duration_since(Instant::now()));
    let cpu_before: Vec<Duration> = targets
        .iter()
        .map(|t| cpu_time(t.kresd))
        .collect::<Result<_>>()?;
    std::thread::sleep(until.saturating_duration_since(Instant::now()));
    let mut out = Vec::with_capacity(targets.len());
    for ((t, threads), before) in targets.iter().zip(threads).zip(cpu_before) {
        let cpu = cpu_time(t.kresd)?.saturating_sub(before);
        let mut total = Counted::default();
        for thread in threads {
            let c = thread
                .join()
                .map_err(|_| anyhow::anyhow!("load thread panicked"))??;
            total.answers += c.answers;
            total.errors += c.errors;
            total.refills += c.refills;
        }
        let label = t.label;
        ensure!(
            total.errors == 0,
            "{label}: {} answers not NOERROR",
            total.errors
        );
        ensure!(total.answers > 0, "{label}: no answer");
        if total.refills > 0 {
            eprintln!(
                "  ({label}: {} windows refilled after a lost answer)",
                total.refills
            );
        }
        out.push(Burst {
            answers: total.answers,
            qps: total.answers as f64 / seconds,
            cpu_us: cpu.as_secs_f64() * 1e6 / total.answers as f64,
        });
    }
    Ok(out)
}
