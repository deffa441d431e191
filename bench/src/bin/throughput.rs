//! What the workers' answer counting costs (the Lua layer at `finish` that counts qtypes,
//! rcodes, cache use and DNSSEC outcomes for the labelled metrics): DNS throughput at
//! saturation of one kresd worker configured by us against one configured by upstream's
//! manager, on the same answer (a local-data record, answered as from the cache).
//!
//! Both resolvers run side by side, one worker each; both have been scraped once, so kresd's
//! `stats` module is loaded in both (lazy mode) and our counting layer is live in ours. Bursts
//! alternate between them: a closed-loop UDP load (several sockets, each keeping a window of
//! queries in flight, a new one sent for every answer), counted after a warm-up. Prints the
//! median answers per second of each and their ratio; the same ratio with both loaded at
//! once (one load thread each), so that both see the same neighbours; and kresd's CPU time
//! per answer (its main thread's, from `/proc/PID/schedstat`): on a machine shared with other
//! work the wall-clock throughput drifts with the neighbours' load, the CPU time an answer
//! costs much less.
//!
//! Usage: cargo build --release --bins && target/release/throughput [RUNS] [SECONDS]

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use bench::closed_loop::{self, Burst, Target, THREADS, WINDOW};
use bench::{answers_a, launch, median, print_header, print_row, write_config, Flavor};
use nix::sys::signal::Signal;
use testbed::{http, Bed, Launched, TestDir};

/// The name every query asks (the local data `bench::write_config` writes).
const QNAME: &str = "bench.test.";

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

impl Resolver {
    /// What a burst loads.
    fn target(&self) -> Target<'_> {
        Target {
            label: self.flavor.label(),
            server: self.server,
            kresd: self.kresd,
        }
    }
}

/// One burst against every resolver of `rs` at once.
fn burst(rs: &[&Resolver], seconds: f64) -> Result<Vec<Burst>> {
    let targets: Vec<Target<'_>> = rs.iter().map(|r| r.target()).collect();
    closed_loop::burst(&targets, QNAME, seconds)
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

/// Whether our worker's answer counting layer is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counting {
    On,
    Off,
}

/// Load or unload our worker's counting layer through its control socket: the same kresd and
/// configuration with and without the counting (the counts resume where they were).
fn set_counting(r: &Resolver, counting: Counting) -> Result<()> {
    let verb = match counting {
        Counting::On => "load",
        Counting::Off => "unload",
    };
    let expr = format!(
        "modules.{verb}({})",
        kres_lua::quote(kres_lua::counts::MODULE)
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(kres_daemon::control::command(
        &r.dir.host("run/control/0"),
        &expr,
        kres_daemon::control::COMMAND_TIMEOUT,
    ))
    .with_context(|| format!("{expr} in our worker"))?;
    Ok(())
}

/// One subject's bursts.
#[derive(Default)]
struct Series {
    /// Answers per second, one per burst.
    qps: Vec<f64>,
    /// kresd's CPU time per answer, in microseconds, one per burst.
    cpu_us: Vec<f64>,
}

impl Series {
    fn push(&mut self, b: &Burst) {
        self.qps.push(b.qps);
        self.cpu_us.push(b.cpu_us);
    }
}

/// Every burst's figures.
#[derive(Default)]
struct Samples {
    /// Ours, counting.
    ours: Series,
    /// Ours with the counting layer unloaded.
    uncounted: Series,
    /// Upstream's.
    upstream: Series,
    /// Ours over upstream's answers per second, of the bursts of each run.
    paired_ratio: Vec<f64>,
    /// Ours over upstream's answers per second, both loaded at once (the same neighbours'
    /// load on both), one per run.
    simultaneous_ratio: Vec<f64>,
}

/// What one burst of a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subject {
    Ours,
    Uncounted,
    Upstream,
}

/// One run: a burst of each subject (in an order that rotates with `i`), then ours and
/// upstream's at once.
fn one_run(
    (ours, upstream): (&Resolver, &Resolver),
    i: usize,
    seconds: f64,
    s: &mut Samples,
) -> Result<()> {
    let mut order = [Subject::Ours, Subject::Upstream, Subject::Uncounted];
    order.rotate_left(i % 3);
    let mut pair = [0.0; 2];
    for subject in order {
        let r = match subject {
            Subject::Ours => {
                set_counting(ours, Counting::On)?;
                ours
            }
            Subject::Uncounted => {
                set_counting(ours, Counting::Off)?;
                ours
            }
            Subject::Upstream => upstream,
        };
        let b = burst(&[r], seconds)?.remove(0);
        eprintln!(
            "run {} {subject:?}: {:.0} q/s, {:.2} us CPU per answer",
            i + 1,
            b.qps,
            b.cpu_us
        );
        match subject {
            Subject::Ours => {
                s.ours.push(&b);
                pair[0] = b.qps;
            }
            Subject::Uncounted => s.uncounted.push(&b),
            Subject::Upstream => {
                s.upstream.push(&b);
                pair[1] = b.qps;
            }
        }
    }
    s.paired_ratio.push(pair[0] / pair[1]);
    set_counting(ours, Counting::On)?;
    // Whose load thread starts first alternates too.
    let (ours_qps, upstream_qps) = if i.is_multiple_of(2) {
        let both = burst(&[ours, upstream], seconds)?;
        (both[0].qps, both[1].qps)
    } else {
        let both = burst(&[upstream, ours], seconds)?;
        (both[1].qps, both[0].qps)
    };
    eprintln!(
        "run {} both at once: ours {ours_qps:.0} q/s, upstream {upstream_qps:.0} q/s",
        i + 1
    );
    s.simultaneous_ratio.push(ours_qps / upstream_qps);
    Ok(())
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let runs: usize = bench::positional(&mut args, "RUNS", 12)?;
    let seconds: f64 = bench::positional(&mut args, "SECONDS", 2.0)?;
    let bed = Bed::get()?;
    let ours = Resolver::start(bed, Flavor::Ours)?;
    let upstream = Resolver::start(bed, Flavor::Upstream)?;
    let mut s = Samples::default();
    for i in 0..runs {
        one_run((&ours, &upstream), i, seconds, &mut s)?;
    }
    let counted = our_counted_queries(&ours)?;
    // At least the answers of the counted bursts (the warm-ups and the simultaneous bursts
    // come on top).
    let answered: f64 = s.ours.qps.iter().map(|q| q * seconds).sum();
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
         {WINDOW} in flight, {runs} runs of {seconds} s bursts"
    );
    print_header();
    print_row("answers per second", "q/s", &s.ours.qps, &s.upstream.qps);
    print_row(
        "kresd CPU per answer",
        "us",
        &s.ours.cpu_us,
        &s.upstream.cpu_us,
    );
    let m = |v: &[f64]| median(v.to_vec());
    println!(
        "  ours/upstream q/s: {:.1}% (medians), {:.1}% (median of the runs' paired ratios), \
         {:.1}% (both loaded at once, median)",
        m(&s.ours.qps) / m(&s.upstream.qps) * 100.0,
        m(&s.paired_ratio) * 100.0,
        m(&s.simultaneous_ratio) * 100.0
    );
    println!(
        "  upstream/ours kresd CPU per answer: {:.1}% (the throughput ours reaches, CPU-bound)",
        m(&s.upstream.cpu_us) / m(&s.ours.cpu_us) * 100.0
    );
    println!(
        "  our kresd with the counting layer unloaded: {:.0} q/s, {:.2} us CPU per answer; \
         the layer costs {:+.1}% CPU per answer",
        m(&s.uncounted.qps),
        m(&s.uncounted.cpu_us),
        (m(&s.ours.cpu_us) / m(&s.uncounted.cpu_us) - 1.0) * 100.0
    );
    println!("  our workers counted {counted} A queries (the counting was live)");
}
