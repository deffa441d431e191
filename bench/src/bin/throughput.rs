//! What the workers' answer counting costs (the Lua layer at `finish` that counts qtypes,
//! rcodes, cache use and DNSSEC outcomes for the labelled metrics): DNS throughput at
//! saturation of one kresd worker configured by us against one configured by upstream's
//! manager, on the same answer (a local-data record, answered as from the cache).
//!
//! Both resolvers run side by side, one worker each; both have been scraped once, so kresd's
//! `stats` module is loaded in both (lazy mode) and our counting layer is live in ours. Bursts
//! alternate between them: a closed-loop UDP load (several sockets, each keeping a window of
//! queries in flight, a new one sent for every answer), counted after a warm-up. Prints the
//! median answers per second of each and their ratio, and kresd's CPU time per answer (its
//! main thread's, from `/proc/PID/schedstat`): on a machine shared with other work the wall
//! clock throughput drifts with the neighbours' load, the CPU time an answer costs much less.
//!
//! Usage: cargo build --release --bins && target/release/throughput [RUNS] [SECONDS]

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use bench::{answers_a, launch, median, print_header, print_row, write_config, Flavor};
use nix::sys::signal::Signal;
use testbed::{http, Bed, Launched, TestDir};

/// The name every query asks (the local data `bench::write_config` writes).
const QNAME: &str = "bench.test.";

/// Load threads, each with one socket.
const THREADS: usize = 2;

/// Queries each socket keeps in flight.
const WINDOW: usize = 64;

/// Not counted at the start of a burst.
const WARM_UP: Duration = Duration::from_millis(500);

/// How long a socket waits for an answer before it refills its window.
const ANSWER_WAIT: Duration = Duration::from_millis(200);

/// One resolver under test.
struct Resolver {
    /// Whose control plane configured it.
    flavor: Flavor,
    /// Its DNS address.
    server: SocketAddr,
    /// Its configuration, rundir and cache.
    dir: TestDir,
    /// The control plane's process tree.
    launched: Launched,
    /// Its only kresd.
    kresd: i32,
}

impl Resolver {
    fn start(bed: &Bed, flavor: Flavor) -> Result<Resolver> {
        let dir = bed.test_dir(&format!("bench-throughput-{}", flavor.label()))?;
        let port = testbed::free_port()?;
        write_config(&dir, port, 1, "")?;
        let (launched, mut notify) = launch(bed, flavor, &dir)?;
        notify.wait_for("READY=1", Duration::from_secs(300))?;
        let server = SocketAddr::from(([127, 0, 0, 1], port));
        ensure!(
            answers_a(server, QNAME, Duration::from_secs(5)),
            "{} does not answer {QNAME}",
            flavor.label()
        );
        // The first collection loads `stats` (and, in ours, the answer counters).
        let resp = http::request(
            &dir.host("run/kres-api.sock"),
            "GET",
            "/metrics/json",
            &[],
            b"",
        )?;
        ensure!(resp.status == 200, "{}: {}", flavor.label(), resp.text());
        let kresd: Vec<i32> = launched
            .descendants()
            .into_iter()
            .filter(|p| p.comm == "kresd")
            .map(|p| p.pid)
            .collect();
        ensure!(kresd.len() == 1, "{}: kresd {kresd:?}", flavor.label());
        Ok(Resolver {
            flavor,
            server,
            dir,
            launched,
            kresd: kresd[0],
        })
    }

    fn stop(mut self) -> Result<()> {
        self.launched.signal(Signal::SIGINT)?;
        let _ = self.launched.wait(Duration::from_secs(120));
        let _ = std::fs::remove_dir_all(&self.dir.host);
        Ok(())
    }
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

/// One thread of the closed loop: `WINDOW` queries in flight on its own socket until
/// `until`; counts what arrives after `count_from`.
fn load_thread(server: SocketAddr, count_from: Instant, until: Instant) -> Result<Counted> {
    let sock = UdpSocket::bind("127.0.0.1:0")?;
    sock.connect(server)?;
    sock.set_read_timeout(Some(ANSWER_WAIT))?;
    let mut query = testbed::dns::encode_query(0, QNAME, testbed::dns::TYPE_A, false)?;
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

/// CPU time of process `pid`'s main thread so far, in nanoseconds (`/proc/PID/schedstat`;
/// kresd answers on its main thread).
fn cpu_time(pid: i32) -> Result<Duration> {
    let schedstat = std::fs::read_to_string(format!("/proc/{pid}/schedstat"))?;
    let ns: u64 = schedstat
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .context("schedstat")?;
    Ok(Duration::from_nanos(ns))
}

/// One burst's outcome.
struct Burst {
    /// Answers per second (wall clock).
    qps: f64,
    /// kresd's CPU time per answer, in microseconds.
    cpu_us: f64,
}

/// One burst of `seconds` (after the warm-up) against `r`.
fn burst(r: &Resolver, seconds: f64) -> Result<Burst> {
    let start = Instant::now();
    let count_from = start + WARM_UP;
    let until = count_from + Duration::from_secs_f64(seconds);
    let server = r.server;
    let threads: Vec<_> = (0..THREADS)
        .map(|_| std::thread::spawn(move || load_thread(server, count_from, until)))
        .collect();
    std::thread::sleep(count_from.saturating_duration_since(Instant::now()));
    let cpu_before = cpu_time(r.kresd)?;
    std::thread::sleep(until.saturating_duration_since(Instant::now()));
    let cpu = cpu_time(r.kresd)?.saturating_sub(cpu_before);
    let mut total = Counted::default();
    for t in threads {
        let c = t
            .join()
            .map_err(|_| anyhow::anyhow!("load thread panicked"))??;
        total.answers += c.answers;
        total.errors += c.errors;
        total.refills += c.refills;
    }
    ensure!(
        total.errors == 0,
        "{} answers were not NOERROR",
        total.errors
    );
    ensure!(total.answers > 0, "no answer");
    if total.refills > 0 {
        eprintln!("  ({} windows refilled after a lost answer)", total.refills);
    }
    Ok(Burst {
        qps: total.answers as f64 / seconds,
        cpu_us: cpu.as_secs_f64() * 1e6 / total.answers as f64,
    })
}

/// Our worker's count of A queries, read from the Prometheus text: proof that the counting
/// was live during the bursts.
fn our_counted_queries(r: &Resolver) -> Result<f64> {
    let resp = http::request(
        &r.dir.host("run/kres-api.sock"),
        "GET",
        "/metrics/prometheus",
        &[],
        b"",
    )?;
    let text = resp.text();
    text.lines()
        .find(|l| l.starts_with("knot_resolver_dns_queries_total{") && l.contains("qtype=\"A\""))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .context("no knot_resolver_dns_queries_total{qtype=\"A\"} in our metrics")
}

/// Every burst's figures, by flavor.
#[derive(Default)]
struct Samples {
    /// Our answers per second, one per burst.
    ours_qps: Vec<f64>,
    /// Upstream's answers per second.
    upstream_qps: Vec<f64>,
    /// Our kresd's CPU time per answer, in microseconds.
    ours_cpu_us: Vec<f64>,
    /// Upstream's kresd's.
    upstream_cpu_us: Vec<f64>,
    /// Ours over upstream's answers per second, of the two bursts of each run.
    paired_ratio: Vec<f64>,
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(15);
    let seconds: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2.0);
    let bed = Bed::get()?;
    let ours = Resolver::start(bed, Flavor::Ours)?;
    let upstream = Resolver::start(bed, Flavor::Upstream)?;
    let mut s = Samples::default();
    for i in 0..runs {
        // Alternate which goes first so drift affects both alike.
        let order = if i % 2 == 0 {
            [&ours, &upstream]
        } else {
            [&upstream, &ours]
        };
        let mut pair = [0.0; 2];
        for r in order {
            let b = burst(r, seconds)?;
            eprintln!(
                "run {}/{runs} {}: {:.0} q/s, {:.2} us CPU per answer",
                i + 1,
                r.flavor.label(),
                b.qps,
                b.cpu_us
            );
            match r.flavor {
                Flavor::Ours => {
                    s.ours_qps.push(b.qps);
                    s.ours_cpu_us.push(b.cpu_us);
                    pair[0] = b.qps;
                }
                Flavor::Upstream => {
                    s.upstream_qps.push(b.qps);
                    s.upstream_cpu_us.push(b.cpu_us);
                    pair[1] = b.qps;
                }
            }
        }
        s.paired_ratio.push(pair[0] / pair[1]);
    }
    let counted = our_counted_queries(&ours)?;
    let answered: f64 = s.ours_qps.iter().map(|q| q * seconds).sum();
    ensure!(
        counted >= answered,
        "our counters saw {counted} A queries, fewer than the {answered} answered"
    );
    ours.stop()?;
    upstream.stop()?;
    report(&s, runs, seconds, counted);
    Ok(())
}

fn report(s: &Samples, runs: usize, seconds: f64, counted: f64) {
    println!(
        "throughput benchmark: {QNAME} A (local data), 1 worker each, {THREADS} sockets x \
         {WINDOW} in flight, {runs} bursts of {seconds} s each, alternating"
    );
    print_header();
    print_row("answers per second", "q/s", &s.ours_qps, &s.upstream_qps);
    print_row(
        "kresd CPU per answer",
        "us",
        &s.ours_cpu_us,
        &s.upstream_cpu_us,
    );
    println!(
        "  ours/upstream q/s: {:.1}% (medians), {:.1}% (median of the runs' paired ratios)",
        median(s.ours_qps.clone()) / median(s.upstream_qps.clone()) * 100.0,
        median(s.paired_ratio.clone()) * 100.0
    );
    println!(
        "  upstream/ours kresd CPU per answer: {:.1}% (throughput ours could reach if CPU-bound)",
        median(s.upstream_cpu_us.clone()) / median(s.ours_cpu_us.clone()) * 100.0
    );
    println!("  our workers counted {counted} A queries (the counting was live)");
}
