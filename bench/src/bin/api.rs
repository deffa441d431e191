//! The management plane under use, ours against upstream's in the same run: sequential
//! `GET /v1/config` requests per second, a worker-affecting change applied (API call
//! returns), a policy-only change applied and visible in DNS, a `logging.level` change applied
//! (ours: live in the running workers; upstream's: a rolling restart), and metrics collection
//! latency with 8 workers. Prints medians side by side.
//!
//! Usage: cargo build --release --bins && target/release/api [RUNS] [WORKERS]
//! (WORKERS: how many workers the worker-affecting change restarts, default 2)

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use bench::{launch, print_header, print_row, write_config, Flavor};
use nix::sys::signal::Signal;
use testbed::{dns, http, Bed};

struct Running {
    launched: testbed::Launched,
    api: std::path::PathBuf,
    server: SocketAddr,
}

fn start(bed: &Bed, flavor: Flavor, workers: u32) -> Result<Running> {
    let dir = bed.test_dir(&format!("bench-api-{}", flavor.label()))?;
    let port = testbed::free_port()?;
    write_config(&dir, port, workers, "")?;
    let (launched, mut notify) = launch(bed, flavor, &dir)?;
    notify.wait_for("READY=1", Duration::from_secs(300))?;
    Ok(Running {
        launched,
        api: dir.host("run/kres-api.sock"),
        server: SocketAddr::from(([127, 0, 0, 1], port)),
    })
}

fn stop(mut r: Running) {
    let _ = r.launched.signal(Signal::SIGINT);
    let _ = r.launched.wait(Duration::from_secs(120));
}

fn request(r: &Running, method: &str, path: &str, body: &str) -> Result<http::HttpResponse> {
    let resp = http::request(
        &r.api,
        method,
        path,
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    )?;
    ensure!(
        resp.status == 200,
        "{method} {path}: {} {}",
        resp.status,
        resp.text()
    );
    Ok(resp)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Sequential GETs on one keep-alive connection for a second; requests per second.
fn keepalive_rps(api: &std::path::Path) -> Result<f64> {
    use std::io::{BufRead, BufReader, Read, Write};
    let stream = std::os::unix::net::UnixStream::connect(api)?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let t0 = Instant::now();
    let mut n = 0u32;
    while t0.elapsed() < Duration::from_secs(1) {
        writer.write_all(b"GET /v1/config HTTP/1.1\r\nHost: localhost\r\n\r\n")?;
        let mut len = 0usize;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line)?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some(v) = l.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse()?;
            }
        }
        let mut body = vec![0u8; len];
        reader.read_exact(&mut body)?;
        n += 1;
    }
    Ok(f64::from(n) / t0.elapsed().as_secs_f64())
}

#[derive(Default)]
struct Samples {
    get_keepalive_rps: Vec<f64>,
    get_rps: Vec<f64>,
    worker_change_ms: Vec<f64>,
    policy_change_ms: Vec<f64>,
    logging_change_ms: Vec<f64>,
    metrics_8_ms: Vec<f64>,
}

fn measure(bed: &Bed, flavor: Flavor, runs: usize, workers: u32, s: &mut Samples) -> Result<()> {
    let r = start(bed, flavor, workers)?;
    for _ in 0..runs {
        let t0 = Instant::now();
        let mut n = 0u32;
        while t0.elapsed() < Duration::from_secs(1) {
            request(&r, "GET", "/v1/config", "")?;
            n += 1;
        }
        s.get_rps.push(f64::from(n) / t0.elapsed().as_secs_f64());
        s.get_keepalive_rps.push(keepalive_rps(&r.api)?);
    }
    for i in 0..runs {
        let value = if i % 2 == 0 { "false" } else { "true" };
        let t0 = Instant::now();
        request(
            &r,
            "PUT",
            "/v1/config/options",
            &format!("{{\"minimize\": {value}}}"),
        )?;
        s.worker_change_ms.push(ms(t0.elapsed()));
    }
    for i in 0..runs {
        let ip = format!("192.0.2.{}", 100 + i);
        let t0 = Instant::now();
        request(
            &r,
            "PUT",
            "/v1/config/local-data/records",
            &format!("\"bench.test. 300 A {ip}\\n\""),
        )?;
        let want: std::net::Ipv4Addr = ip.parse()?;
        loop {
            let a = dns::query_udp(
                r.server,
                "bench.test.",
                dns::TYPE_A,
                Duration::from_millis(200),
            )?
            .a();
            if a == vec![want] {
                break;
            }
            ensure!(
                t0.elapsed() < Duration::from_secs(30),
                "new record never answered"
            );
        }
        s.policy_change_ms.push(ms(t0.elapsed()));
    }
    for i in 0..runs {
        let level = if i % 2 == 0 { "info" } else { "notice" };
        let t0 = Instant::now();
        request(
            &r,
            "PUT",
            "/v1/config/logging/level",
            &format!("\"{level}\""),
        )?;
        s.logging_change_ms.push(ms(t0.elapsed()));
    }
    stop(r);
    let r = start(bed, flavor, 8)?;
    request(&r, "GET", "/metrics/json", "")?; // loads the stats module (lazy mode)
    for _ in 0..runs {
        let t0 = Instant::now();
        let resp = request(&r, "GET", "/metrics/json", "")?;
        s.metrics_8_ms.push(ms(t0.elapsed()));
        ensure!(
            resp.text().contains("kresd:kresd7"),
            "8 workers in the metrics"
        );
    }
    stop(r);
    Ok(())
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let runs: usize = bench::positional(&mut args, "RUNS", 5)?;
    let workers: u32 = bench::positional(&mut args, "WORKERS", 2)?;
    let bed = Bed::get()?;
    let (mut ours, mut upstream) = (Samples::default(), Samples::default());
    measure(bed, Flavor::Ours, runs, workers, &mut ours)?;
    measure(bed, Flavor::Upstream, runs, workers, &mut upstream)?;
    measure(bed, Flavor::Ours, runs, workers, &mut ours)?;
    println!(
        "management API benchmark: {runs} samples per block, blocks ours/upstream/ours, \
         {workers} workers for the worker-affecting change"
    );
    print_header();
    print_row(
        "GET /v1/config, new connection each",
        "req/s",
        &ours.get_rps,
        &upstream.get_rps,
    );
    print_row(
        "GET /v1/config, one keep-alive conn.",
        "req/s",
        &ours.get_keepalive_rps,
        &upstream.get_keepalive_rps,
    );
    println!(
        "  (requests per second: higher is better; ours/upstream = {:.1}x new connections, {:.1}x keep-alive)",
        bench::median(ours.get_rps.clone()) / bench::median(upstream.get_rps.clone()),
        bench::median(ours.get_keepalive_rps.clone()) / bench::median(upstream.get_keepalive_rps.clone())
    );
    print_row(
        "worker-affecting change applied",
        "ms",
        &ours.worker_change_ms,
        &upstream.worker_change_ms,
    );
    print_row(
        "policy-only change -> answered",
        "ms",
        &ours.policy_change_ms,
        &upstream.policy_change_ms,
    );
    print_row(
        "logging.level change applied",
        "ms",
        &ours.logging_change_ms,
        &upstream.logging_change_ms,
    );
    print_row(
        "GET /metrics/json, 8 workers",
        "ms",
        &ours.metrics_8_ms,
        &upstream.metrics_8_ms,
    );
    Ok(())
}
