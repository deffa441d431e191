//! What open status pages cost: the API's latency with no page and with ten pages open, and
//! the daemon's CPU time with no page and with one. A page is simulated with the requests
//! the page itself makes (`daemon/src/api/ui/app.js`): its files, its identity, the process table,
//! the API's description, then one `/events` stream held open, `/metrics/json` every 5 s, the
//! four top lists and the query log every 10 s, `/processes` and `/upstreams` every 15 s.
//! The resolver runs with the query log on and its ring filled first, so the top lists count
//! a full ring as they would on a busy resolver. Ours only: upstream has no page.
//!
//! The API's latency is sampled over a while (a `GET /v1/config` every 20 ms, a `GET
//! /metrics/json` every 100 ms, a new connection each as kresctl makes), long enough for
//! every periodic read of the pages to fall within it.
//!
//! Usage: cargo build --release --bins && target/release/ui_pages [--pages N]
//!        [--seconds S] [--cpu-seconds S] [--fill N]
//! (defaults: 10 pages, 60 s per latency sample, 60 s per CPU sample, 10,000 queries to fill
//! the ring)

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bench::{launch, write_config, Flavor};
use nix::sys::signal::Signal;
use testbed::http::EventStream;
use testbed::{dns, http, Bed, Launched};

/// What one open page reads once, at its load.
const FIRST_READS: &[&str] = &[
    "/ui",
    "/ui/app.js",
    "/ui/app.css",
    "/ui/favicon.svg",
    "/ui/whoami",
    "/processes",
    "/metrics/json",
    "/rpz",
    "/openapi.json",
];

/// What one open page reads again and again: every so often, these paths.
const PERIODIC_READS: &[(Duration, &[&str])] = &[
    (Duration::from_secs(5), &["/metrics/json"]),
    (
        Duration::from_secs(10),
        &[
            "/top/clients?limit=10",
            "/top/names?limit=10",
            "/top/servfail?limit=10",
            "/top/nxdomain?limit=10",
            "/query-log?limit=25",
        ],
    ),
    (Duration::from_secs(15), &["/processes", "/upstreams"]),
];

struct Options {
    pages: usize,
    seconds: u64,
    cpu_seconds: u64,
    fill: usize,
}

fn options() -> Result<Options> {
    let mut o = Options {
        pages: 10,
        seconds: 60,
        cpu_seconds: 60,
        fill: 10_000,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        let bad = || format!("{flag}: not a number: {value}");
        match flag.as_str() {
            "--pages" => o.pages = value.parse().with_context(bad)?,
            "--seconds" => o.seconds = value.parse().with_context(bad)?,
            "--cpu-seconds" => o.cpu_seconds = value.parse().with_context(bad)?,
            "--fill" => o.fill = value.parse().with_context(bad)?,
            _ => bail!("unknown option {flag} (--pages, --seconds, --cpu-seconds, --fill)"),
        }
    }
    Ok(o)
}

/// One simulated open page: its event stream and its periodic reads, on threads of their own
/// until dropped.
struct Page {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Page {
    /// Load the page as the browser does, then follow and read on its schedule; `offset`
    /// shifts its schedule so that pages opened together do not read in step. `reads`
    /// counts every request made, `failures` those not answered 200.
    fn open(
        api: &Path,
        offset: Duration,
        reads: Arc<AtomicU64>,
        failures: Arc<AtomicU64>,
    ) -> Result<Page> {
        for path in FIRST_READS {
            read(api, path, &reads, &failures);
        }
        let mut events = EventStream::open(api, "/events", &[])?;
        ensure!(events.status == 200, "/events: {}", events.status);
        reads.fetch_add(1, Ordering::Relaxed);
        let stop = Arc::new(AtomicBool::new(false));
        let follower = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match events.next(Duration::from_millis(200)) {
                        Ok(Some(_)) => {}
                        // Ended, or broken.
                        Ok(None) => return,
                        Err(e) if e.downcast_ref::<std::io::Error>().is_some() => return,
                        // Quiet: the page waits as long as it is open.
                        Err(_) => {}
                    }
                }
            })
        };
        let poller = {
            let (stop, api) = (stop.clone(), api.to_owned());
            std::thread::spawn(move || poll(&api, offset, &stop, &reads, &failures))
        };
        Ok(Page {
            stop,
            threads: vec![follower, poller],
        })
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The page's periodic reads until `stop`.
fn poll(api: &Path, offset: Duration, stop: &AtomicBool, reads: &AtomicU64, failures: &AtomicU64) {
    let start = Instant::now() + offset;
    let mut next: Vec<Instant> = PERIODIC_READS
        .iter()
        .map(|(every, _)| start + *every)
        .collect();
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        for (due, (every, paths)) in next.iter_mut().zip(PERIODIC_READS) {
            if *due <= now {
                for path in *paths {
                    read(api, path, reads, failures);
                }
                *due += *every;
            }
        }
        // A load generator's own clock: it waits for its schedule, it orders nothing.
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn read(api: &Path, path: &str, reads: &AtomicU64, failures: &AtomicU64) {
    reads.fetch_add(1, Ordering::Relaxed);
    match http::request(api, "GET", path, &[], b"") {
        Ok(r) if r.status == 200 => {}
        _ => {
            failures.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// How long one `GET path` takes (a new connection, as kresctl makes), in ms.
fn latency(api: &Path, path: &str) -> Result<f64> {
    let t0 = Instant::now();
    let r = http::request(api, "GET", path, &[], b"")?;
    ensure!(r.status == 200, "{path}: {}", r.status);
    Ok(t0.elapsed().as_secs_f64() * 1000.0)
}

/// The `q` quantile of `v` (nearest rank).
fn quantile(mut v: Vec<f64>, q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// CPU time every thread of `pid` has used so far (`/proc/PID/task/*/schedstat`).
fn cpu_time(pid: i32) -> Duration {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Duration::ZERO;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split(' ').next().and_then(|n| n.parse::<u64>().ok()))
        .map(Duration::from_nanos)
        .sum()
}

/// CPU time of the control plane (every process but kresd and kres-cache-gc) and of the
/// workers (kresd) so far.
fn cpu_split(launched: &Launched) -> (Duration, Duration) {
    let mut control = Duration::ZERO;
    let mut workers = Duration::ZERO;
    for p in launched.tree() {
        match p.comm.as_str() {
            "kresd" => workers += cpu_time(p.pid),
            "kres-cache-gc" => {}
            _ => control += cpu_time(p.pid),
        }
    }
    (control, workers)
}

/// The control plane's and the workers' CPU over `seconds`, as percent of one core.
fn cpu_over(launched: &Launched, seconds: u64) -> (f64, f64) {
    let before = cpu_split(launched);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(seconds));
    let after = cpu_split(launched);
    let wall = t0.elapsed().as_secs_f64();
    let percent = |a: Duration, b: Duration| 100.0 * a.saturating_sub(b).as_secs_f64() / wall;
    (percent(after.0, before.0), percent(after.1, before.1))
}

/// Fill the query log's ring: `n` queries from eight loopback clients for names of local
/// data and special-use names answered NXDOMAIN.
fn fill(server: std::net::SocketAddr, n: usize) -> Result<()> {
    for i in 0..n {
        let client = std::net::IpAddr::from([127, 0, 0, 2 + (i % 8) as u8]);
        let name = if i % 3 == 0 {
            "bench.test.".to_owned()
        } else {
            format!("n{}.missing.test.", i % 500)
        };
        dns::query_udp_from(client, server, &name, dns::TYPE_A, Duration::from_secs(2))?;
    }
    Ok(())
}

struct Running {
    launched: Launched,
    api: PathBuf,
    server: std::net::SocketAddr,
}

fn start(bed: &Bed) -> Result<Running> {
    let dir = bed.test_dir("bench-ui-pages")?;
    let port = testbed::free_port()?;
    write_config(
        &dir,
        port,
        2,
        "monitoring:\n  query-log:\n    enabled: true\n    entries: 10000\n",
    )?;
    let (launched, mut notify) = launch(bed, Flavor::Ours, &dir)?;
    notify.wait_for("READY=1", Duration::from_secs(300))?;
    Ok(Running {
        launched,
        api: dir.host("run/kres-api.sock"),
        server: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
    })
}

/// p50 and p99 of `GET /v1/config` (every 20 ms) and `GET /metrics/json` (every 100 ms)
/// over `seconds`, in ms; and how many of each were sampled.
fn api_latency(api: &Path, seconds: u64) -> Result<([f64; 4], usize, usize)> {
    const TICK: Duration = Duration::from_millis(20);
    let (mut config, mut metrics) = (Vec::new(), Vec::new());
    let t0 = Instant::now();
    let mut next = t0;
    let mut tick = 0u64;
    while t0.elapsed() < Duration::from_secs(seconds) {
        config.push(latency(api, "/v1/config")?);
        if tick.is_multiple_of(5) {
            metrics.push(latency(api, "/metrics/json")?);
        }
        tick += 1;
        next += TICK;
        // The load's pace: a request every tick, whatever the answers took.
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    let counts = (config.len(), metrics.len());
    Ok((
        [
            quantile(config.clone(), 0.5),
            quantile(config, 0.99),
            quantile(metrics.clone(), 0.5),
            quantile(metrics, 0.99),
        ],
        counts.0,
        counts.1,
    ))
}

fn open_pages(
    api: &Path,
    n: usize,
    reads: &Arc<AtomicU64>,
    failures: &Arc<AtomicU64>,
) -> Result<Vec<Page>> {
    (0..n)
        .map(|i| {
            // Spread over the shortest period, as pages opened at different moments are.
            let offset = Duration::from_millis(5000 * i as u64 / n.max(1) as u64);
            Page::open(api, offset, reads.clone(), failures.clone())
        })
        .collect()
}

fn main() -> Result<()> {
    let o = options()?;
    let bed = Bed::get()?;
    let r = start(bed)?;
    // The first read loads kresd's stats module, as a page's first look does.
    http::request(&r.api, "GET", "/metrics/json", &[], b"")?;
    let t0 = Instant::now();
    fill(r.server, o.fill)?;
    println!(
        "status page benchmark: {} queries in the ring ({:.1} s to fill), 2 workers",
        o.fill,
        t0.elapsed().as_secs_f64()
    );

    // Latency: no page, then N pages, then no page again.
    let reads = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let mut rows: Vec<(String, [f64; 4])> = Vec::new();
    let (no_page, n_config, n_metrics) = api_latency(&r.api, o.seconds)?;
    rows.push(("no page".into(), no_page));
    let pages = open_pages(&r.api, o.pages, &reads, &failures)?;
    let opened = Instant::now();
    let before = reads.load(Ordering::Relaxed);
    rows.push((
        format!("{} pages open", o.pages),
        api_latency(&r.api, o.seconds)?.0,
    ));
    let page_reads = reads.load(Ordering::Relaxed) - before;
    let page_minutes = opened.elapsed().as_secs_f64() / 60.0;
    drop(pages);
    rows.push(("no page again".into(), api_latency(&r.api, o.seconds)?.0));
    println!(
        "{:<16} {:>14} {:>14} {:>16} {:>16}",
        "", "config p50 ms", "config p99 ms", "metrics p50 ms", "metrics p99 ms"
    );
    for (label, [a, b, c, d]) in &rows {
        println!("{label:<16} {a:>14.3} {b:>14.3} {c:>16.3} {d:>16.3}");
    }
    println!(
        "  (each sample over {} s: {n_config} requests to /v1/config, {n_metrics} to \
         /metrics/json; the pages made {:.0} requests a minute together while measured, {} not \
         answered 200)",
        o.seconds,
        page_reads as f64 / page_minutes.max(f64::EPSILON),
        failures.load(Ordering::Relaxed)
    );

    // CPU: no page, then one page, each over the same time.
    let (idle_control, idle_workers) = cpu_over(&r.launched, o.cpu_seconds);
    let page = open_pages(&r.api, 1, &reads, &failures)?;
    let (page_control, page_workers) = cpu_over(&r.launched, o.cpu_seconds);
    drop(page);
    println!(
        "CPU over {} s, % of one core       control plane   workers (kresd)",
        o.cpu_seconds
    );
    println!("  no page                         {idle_control:>13.3} {idle_workers:>9.3}");
    println!("  one page open                   {page_control:>13.3} {page_workers:>9.3}");
    println!(
        "  one page's cost: {:.3} % of a core ({:.2} s of CPU a minute)",
        (page_control + page_workers) - (idle_control + idle_workers),
        ((page_control + page_workers) - (idle_control + idle_workers)) * 0.6
    );
    let mut launched = r.launched;
    let _ = launched.signal(Signal::SIGINT);
    let _ = launched.wait(Duration::from_secs(120));
    Ok(())
}
