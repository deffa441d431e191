//! A subscribed list of millions of entries: how long from `kresctl rpz refresh` until its
//! last entry is blocked by kresd, and how much the manager's peak resident memory grows
//! meanwhile (the list is streamed to disk and compiled a line at a time, so it should not
//! grow with the list).
//!
//! A loopback HTTP server here serves a domains list; our resolver subscribes to it. It
//! starts on a list of one entry (the baseline of memory), then the list is replaced by one
//! of N entries and a refresh is asked through the API, which answers once the new version
//! is in force; then an unchanged refresh (one 304, no policy-loader run) is timed. While the
//! large version goes into force, a local-data name is asked every 2 ms: the answers' p50, p99
//! and worst latency in that window. The same names as a plain RPZ file, swapped in as
//! operators do today (the file replaced, then `POST /renew`), are timed the same way beside
//! it. Prints the figures; asserts nothing about them.
//!
//! Usage: cargo build --release --bins && target/release/lists [ENTRIES (3000000)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bench::{launch, until, Flavor};

/// Generous bound for one step on a loaded 2-core machine; never a performance assertion.
const STEP_TIMEOUT: Duration = Duration::from_secs(1800);

/// The body served, and its ETag.
type Served = Arc<Mutex<(Arc<Vec<u8>>, String)>>;

/// Serve `served` at every path, with its ETag (304 to a client that has it).
fn serve(served: Served) -> Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let served = served.clone();
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 16384 {
                    match stream.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let (body, etag) = served
                    .lock()
                    .map(|s| s.clone())
                    .unwrap_or_else(|e| e.into_inner().clone());
                if head.contains(&format!("if-none-match: {etag}")) {
                    let _ = stream.write_all(
                        format!("HTTP/1.1 304 Not Modified\r\nETag: {etag}\r\nConnection: close\r\n\r\n")
                            .as_bytes(),
                    );
                    return;
                }
                let _ = stream
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nETag: {etag}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .and_then(|()| stream.write_all(&body));
            });
        }
    });
    Ok(addr)
}

/// A domains list of `n` names.
fn list_of(n: usize) -> Vec<u8> {
    let mut body = Vec::with_capacity(n * 32);
    for i in 0..n {
        body.extend_from_slice(format!("n{i}.bench-list.net\n").as_bytes());
    }
    body
}

/// A memory figure of `/proc/PID/status` (`VmRSS:`, `VmHWM:`), in KiB.
fn memory_kib(pid: i32, key: &str) -> Result<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))?
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("a memory figure")
}

/// Ask `bench.test.` of `server` every 2 ms until `stop`: each answer's latency (one lost
/// counts as the 2 s it was waited for).
fn probe(server: SocketAddr, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<Duration>> {
    std::thread::spawn(move || {
        let mut latencies = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let t0 = Instant::now();
            let wait = Duration::from_secs(2);
            let answered = bench::answers_a(server, "bench.test.", wait);
            latencies.push(if answered { t0.elapsed() } else { wait });
            std::thread::sleep(Duration::from_millis(2).saturating_sub(t0.elapsed()));
        }
        latencies
    })
}

/// `p50 / p99 / max` of `latencies`, in milliseconds, with their count.
fn latency_line(mut latencies: Vec<Duration>) -> String {
    latencies.sort();
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
    };
    format!(
        "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms over {} answers",
        at(0.5),
        at(0.99),
        latencies.last().map_or(f64::NAN, |d| d.as_secs_f64() * 1e3),
        latencies.len()
    )
}

/// The same names as a plain RPZ file, swapped in as operators do today: the file replaced
/// whole, then `POST /renew`. Until the last name is blocked, and the latencies meanwhile.
fn plain_file(bed: &testbed::Bed, entries: usize) -> Result<(Duration, Duration, String)> {
    let dir = bed.test_dir("bench-lists-plain")?;
    let zone = |n: usize| {
        let mut body =
            b"$TTL 300\n@ SOA localhost. root.localhost. 1 3600 600 86400 300\n  NS localhost.\n"
                .to_vec();
        for i in 0..n {
            body.extend_from_slice(format!("n{i}.bench-list.net CNAME .\n").as_bytes());
        }
        body
    };
    std::fs::write(dir.host("plain.rpz"), zone(1))?;
    let port = testbed::free_port()?;
    let rpz = format!("  rpz:\n    - file: {}\n", dir.bed("plain.rpz").display());
    bench::write_config(&dir, port, 1, &rpz)?;
    let (mut launched, mut notify) = launch(bed, Flavor::Ours, &dir)?;
    notify
        .wait_for("READY=1", STEP_TIMEOUT)
        .with_context(|| launched.output.text())?;
    let server = SocketAddr::from(([127, 0, 0, 1], port));
    let api = dir.host("run/kres-api.sock");
    std::fs::write(dir.host("plain.rpz.new"), zone(entries))?;
    let stop = Arc::new(AtomicBool::new(false));
    let prober = probe(server, stop.clone());
    let t0 = Instant::now();
    std::fs::rename(dir.host("plain.rpz.new"), dir.host("plain.rpz"))?;
    let answer = testbed::http::request(&api, "POST", "/renew", &[], b"")?;
    anyhow::ensure!(answer.status == 200, "renew: {}", answer.text());
    let renewed = t0.elapsed();
    let last = format!("n{}.bench-list.net.", entries - 1);
    let (blocked, ()) = until(t0, STEP_TIMEOUT, || {
        testbed::dns::query_udp(server, &last, testbed::dns::TYPE_A, Duration::from_secs(2))
            .is_ok_and(|r| r.rcode == 3)
            .then_some(())
    })?;
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let latencies = prober
        .join()
        .map_err(|_| anyhow::anyhow!("the prober panicked"))?;
    launched.signal(nix::sys::signal::Signal::SIGINT)?;
    launched.wait(Duration::from_secs(60))?;
    Ok((renewed, blocked, latency_line(latencies)))
}

fn main() -> Result<()> {
    let entries: usize = bench::positional(&mut std::env::args().skip(1), "ENTRIES", 3_000_000)?;
    let bed = testbed::Bed::get()?;
    let dir = bed.test_dir("bench-lists")?;
    let served: Served = Arc::new(Mutex::new((Arc::new(list_of(1)), "\"small\"".into())));
    let addr = serve(served.clone())?;
    let port = testbed::free_port()?;
    let rpz = format!(
        "  rpz:\n    - file: {}\n      url: http://{addr}/list.txt\n      format: domains\n      max-size: 1G\n",
        dir.bed("list.rpz").display()
    );
    bench::write_config(&dir, port, 1, &rpz)?;
    let (launched, mut notify) = launch(bed, Flavor::Ours, &dir)?;
    notify
        .wait_for("READY=1", STEP_TIMEOUT)
        .with_context(|| launched.output.text())?;
    let api = dir.host("run/kres-api.sock");
    let refresh = || -> Result<Duration> {
        let t0 = Instant::now();
        let answer = testbed::http::request(&api, "POST", "/rpz/lists/refresh", &[], b"")?;
        anyhow::ensure!(answer.status == 200, "refresh: {}", answer.text());
        Ok(t0.elapsed())
    };
    refresh()?;
    let manager = launched
        .tree()
        .into_iter()
        .find(|p| p.comm == "kres-manager")
        .context("the manager process")?
        .pid;
    let server = SocketAddr::from(([127, 0, 0, 1], port));
    let last = format!("n{}.bench-list.net.", entries - 1);
    let before_rss = memory_kib(manager, "VmRSS:")?;
    let before_peak = memory_kib(manager, "VmHWM:")?;

    let body = list_of(entries);
    let bytes = body.len();
    if let Ok(mut s) = served.lock() {
        *s = (Arc::new(body), "\"large\"".into());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let prober = probe(server, stop.clone());
    let t0 = Instant::now();
    let took = refresh()?;
    let (blocked, ()) = until(t0, STEP_TIMEOUT, || {
        testbed::dns::query_udp(server, &last, testbed::dns::TYPE_A, Duration::from_secs(2))
            .is_ok_and(|r| r.rcode == 3)
            .then_some(())
    })?;
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let during = latency_line(
        prober
            .join()
            .map_err(|_| anyhow::anyhow!("the prober panicked"))?,
    );
    let after_peak = memory_kib(manager, "VmHWM:")?;
    let unchanged = refresh()?;
    println!("subscribed list of {entries} entries ({bytes} bytes, domains format)");
    println!(
        "  refresh until in force (API answer): {:.1} s",
        took.as_secs_f64()
    );
    println!(
        "  until its last entry is blocked:     {:.1} s",
        blocked.as_secs_f64()
    );
    println!(
        "  unchanged refresh (one 304):         {:.3} s",
        unchanged.as_secs_f64()
    );
    println!(
        "  manager: RSS before {before_rss} KiB, peak before {before_peak} KiB, peak after {after_peak} KiB: growth {} KiB",
        after_peak.saturating_sub(before_peak.max(before_rss))
    );
    println!("  DNS while it goes into force:       {during}");
    let mut launched = launched;
    launched.signal(nix::sys::signal::Signal::SIGINT)?;
    launched.wait(Duration::from_secs(60))?;
    let (renewed, plain_blocked, plain_during) = plain_file(bed, entries)?;
    println!("the same names as a plain RPZ file, replaced, then POST /renew");
    println!(
        "  renew answered:                      {:.1} s",
        renewed.as_secs_f64()
    );
    println!(
        "  until its last entry is blocked:     {:.1} s",
        plain_blocked.as_secs_f64()
    );
    println!("  DNS while it goes into force:       {plain_during}");
    Ok(())
}
