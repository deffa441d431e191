//! What the query log costs, in one run: throughput at saturation of one kresd worker with
//! the query log on, the same configuration with it off, and upstream's manager, in bursts
//! interleaved (their order rotating from run to run), as medians and as the medians of each
//! run's paired ratios; the manager process's CPU time per 100,000 answers while only the
//! reader works (with the log on, and off for the baseline); the manager's memory with the
//! ring empty, at 10,000 and at 100,000 entries (RSS and PSS); and `kresctl top names` and
//! `kresctl top clients` wall time over a full ring of 100,000; and the answers' latency at
//! 2,000 q/s (an open loop) while the reader runs, while it is stopped (SIGSTOP, 10 s), after
//! it resumes, and after it is killed (the supervisor starts it again), with the queries lost
//! and how long the batches take to come back.
//!
//! The load is the closed loop of `bench::closed_loop` on one local-data name; the ring is
//! filled with distinct names (`fN.fill.test.`, an empty subtree of the local data), as real
//! traffic would bring.
//!
//! Usage: bash bench/run.sh query_log [RUNS] [SECONDS] [STALLS]   (defaults: 9 runs, 2 s
//! bursts, 3 stalls)

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bench::closed_loop::{self, Burst, Target, THREADS, WINDOW};
use bench::{answers_a, launch, median, our_binary, write_config, Flavor, FILL_RULES};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use testbed::load::{Load, LoadReport, LoadSpec, Percentiles};
use testbed::{http, Bed, Launched, TestDir};

/// The name the throughput bursts ask (the local data `bench::write_config` writes).
const QNAME: &str = "bench.test.";

/// The ring's size of the resolver with the query log on.
const RING: u64 = 100_000;

/// How long the log may take to hold what was answered.
const SETTLE: Duration = Duration::from_secs(60);

/// The three subjects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subject {
    LogOn,
    LogOff,
    Upstream,
}

impl Subject {
    fn label(self) -> &'static str {
        match self {
            Subject::LogOn => "query log on",
            Subject::LogOff => "query log off",
            Subject::Upstream => "upstream",
        }
    }
}

/// One resolver under test.
struct Resolver {
    subject: Subject,
    server: SocketAddr,
    dir: TestDir,
    launched: Launched,
    /// Its only kresd.
    kresd: i32,
    /// Our manager process (the query log's reader); `None` for upstream's.
    manager: Option<i32>,
}

impl Resolver {
    fn start(bed: &Bed, subject: Subject) -> Result<Resolver> {
        let (flavor, extra) = match subject {
            Subject::LogOn => (
                Flavor::Ours,
                format!("{FILL_RULES}monitoring:\n  query-log:\n    enabled: true\n    entries: {RING}\n"),
            ),
            Subject::LogOff => (Flavor::Ours, FILL_RULES.to_owned()),
            Subject::Upstream => (Flavor::Upstream, FILL_RULES.to_owned()),
        };
        let dir = bed.test_dir(&format!("bench-query-log-{subject:?}"))?;
        let port = testbed::free_port()?;
        write_config(&dir, port, 1, &extra)?;
        let (launched, mut notify) = launch(bed, flavor, &dir)?;
        notify.wait_for("READY=1", Duration::from_secs(300))?;
        let server = SocketAddr::from(([127, 0, 0, 1], port));
        ensure!(
            answers_a(server, QNAME, Duration::from_secs(5)),
            "{} does not answer {QNAME}",
            subject.label()
        );
        let named = |comm: &str| -> Vec<i32> {
            launched
                .descendants()
                .into_iter()
                .filter(|p| p.comm == comm)
                .map(|p| p.pid)
                .collect()
        };
        let kresd = named("kresd");
        ensure!(kresd.len() == 1, "{}: kresd {kresd:?}", subject.label());
        let manager = named("kres-manager").first().copied();
        ensure!(
            manager.is_some() == (flavor == Flavor::Ours),
            "{}: no manager process",
            subject.label()
        );
        let r = Resolver {
            subject,
            server,
            dir,
            launched,
            kresd: kresd[0],
            manager,
        };
        // Both flavours' `stats` loaded, as a scraped resolver has it.
        r.get("/metrics/json")?;
        Ok(r)
    }

    fn api(&self) -> PathBuf {
        self.dir.host("run/kres-api.sock")
    }

    fn get(&self, path: &str) -> Result<Value> {
        let resp = http::request(&self.api(), "GET", path, &[], b"")?;
        ensure!(resp.status == 200, "{path}: {}", resp.text());
        Ok(serde_json::from_slice(&resp.body)?)
    }

    fn target(&self) -> Target<'_> {
        Target {
            label: self.subject.label(),
            server: self.server,
            kresd: self.kresd,
        }
    }

    /// The query log's status until `done` accepts it.
    fn wait_log(&self, what: &str, done: impl Fn(&Value) -> bool) -> Result<Value> {
        let deadline = Instant::now() + SETTLE;
        loop {
            let status = self.get("/query-log/status")?;
            if done(&status) {
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!("{what}: {status}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(mut self) -> Result<()> {
        self.launched.signal(Signal::SIGINT)?;
        let _ = self.launched.wait(Duration::from_secs(120));
        let _ = std::fs::remove_dir_all(&self.dir.host);
        Ok(())
    }
}

/// CPU time of every thread of process `pid` so far (`/proc/PID/task/*/schedstat`).
fn process_cpu(pid: i32) -> Result<Duration> {
    let mut total = Duration::ZERO;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let task = task?.path();
        if let Ok(schedstat) = std::fs::read_to_string(task.join("schedstat")) {
            let ns: u64 = schedstat
                .split(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .context("schedstat")?;
            total += Duration::from_nanos(ns);
        }
    }
    Ok(total)
}

/// The manager's memory: (RSS, PSS) in KiB.
fn memory(r: &Resolver) -> Result<(u64, u64)> {
    let pid = r.manager.context("no manager")?;
    Ok((
        testbed::procs::rss_kib(pid).context("rss")?,
        testbed::procs::pss_kib(pid).context("pss")?,
    ))
}

/// Distinct names answered until the ring holds `target` entries (the workers drop what the
/// reader does not take in time, so more may be asked); the status then.
fn fill_until(on: &Resolver, next: &mut u64, target: u64) -> Result<Value> {
    let held = |s: &Value| s["held"].as_u64().unwrap_or(0);
    let seen = |s: &Value| s["received"].as_u64().unwrap_or(0) + s["missed"].as_u64().unwrap_or(0);
    let mut status = on.get("/query-log/status")?;
    while held(&status) < target {
        let n = target - held(&status);
        let before = seen(&status);
        bench::fill_names(on.server, *next, *next + n)?;
        *next += n;
        // Until every answer is either received or counted as missed (within one).
        status = on.wait_log("the answers accounted for", |s| seen(s) + 1 >= before + n)?;
    }
    Ok(status)
}

/// The ring's memory: the manager's (entries held, RSS, PSS) with the ring empty, at 10,000
/// distinct answers and at 100,000 (the ring full).
fn ring_memory(on: &Resolver) -> Result<[(u64, u64, u64); 3]> {
    let held = |s: &Value| s["held"].as_u64().unwrap_or(0);
    let status = on.wait_log("the worker's count", |s| {
        s["workers_counted"].as_u64() >= Some(1)
    })?;
    let measure = |status: &Value| -> Result<(u64, u64, u64)> {
        let (rss, pss) = memory(on)?;
        Ok((held(status), rss, pss))
    };
    let empty = measure(&status)?;
    let mut next = 0;
    let ten = measure(&fill_until(on, &mut next, empty.0 + 10_000)?)?;
    let full = measure(&fill_until(on, &mut next, RING)?)?;
    Ok([empty, ten, full])
}

/// `kresctl top KIND --json` over the full ring: its wall time, in milliseconds.
fn top_ms(on: &Resolver, kind: &str) -> Result<f64> {
    let kresctl = our_binary("kresctl")?;
    let began = Instant::now();
    let out = Command::new(&kresctl)
        .arg("-s")
        .arg(on.api())
        .args(["top", kind, "--json"])
        .output()?;
    let ms = began.elapsed().as_secs_f64() * 1e3;
    ensure!(
        out.status.success(),
        "kresctl top {kind}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Value = serde_json::from_slice(&out.stdout)?;
    ensure!(
        list["counted"].as_u64() == Some(RING),
        "kresctl top {kind} counted {}",
        list["counted"]
    );
    Ok(ms)
}

/// Every burst's figures.
#[derive(Default)]
struct Samples {
    /// Answers per second of each subject, one per run.
    qps: [Vec<f64>; 3],
    /// kresd's CPU per answer (us) of each subject.
    kresd_cpu_us: [Vec<f64>; 3],
    /// Our manager process's CPU per 100,000 answers (ms): log on, log off.
    manager_cpu_ms: [Vec<f64>; 2],
    /// on/off and off/upstream answers per second, of the bursts of each run.
    on_over_off: Vec<f64>,
    off_over_upstream: Vec<f64>,
}

fn index(subject: Subject) -> usize {
    match subject {
        Subject::LogOn => 0,
        Subject::LogOff => 1,
        Subject::Upstream => 2,
    }
}

/// One run: a burst of each subject, in an order rotating with `i`.
fn one_run(rs: &[Resolver; 3], i: usize, seconds: f64, s: &mut Samples) -> Result<()> {
    let mut order = [0, 1, 2];
    order.rotate_left(i % 3);
    let mut qps = [0.0; 3];
    for k in order {
        let r = &rs[k];
        let manager_before = r.manager.map(process_cpu).transpose()?;
        let began = Instant::now();
        let b: Burst = closed_loop::burst(&[r.target()], QNAME, seconds)?.remove(0);
        let wall = began.elapsed().as_secs_f64();
        let at = index(r.subject);
        s.qps[at].push(b.qps);
        s.kresd_cpu_us[at].push(b.cpu_us);
        qps[at] = b.qps;
        let mut line = format!(
            "run {} {}: {:.0} q/s, kresd {:.2} us CPU per answer",
            i + 1,
            r.subject.label(),
            b.qps,
            b.cpu_us
        );
        if let (Some(pid), Some(before)) = (r.manager, manager_before) {
            // The manager's CPU over the whole burst (warm-up included), per the answers
            // of the whole burst (estimated at the counted rate).
            let cpu = process_cpu(pid)?.saturating_sub(before);
            let answers = b.qps * wall;
            let per_100k = cpu.as_secs_f64() * 1e3 * 100_000.0 / answers;
            s.manager_cpu_ms[at].push(per_100k);
            line.push_str(&format!(", manager {per_100k:.1} ms CPU per 100k answers"));
        }
        eprintln!("{line}");
    }
    s.on_over_off.push(qps[0] / qps[1]);
    s.off_over_upstream.push(qps[1] / qps[2]);
    Ok(())
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let runs: usize = bench::positional(&mut args, "RUNS", 9)?;
    let seconds: f64 = bench::positional(&mut args, "SECONDS", 2.0)?;
    let stalls: usize = bench::positional(&mut args, "STALLS", 3)?;
    let bed = Bed::get()?;
    let rs = [
        Resolver::start(bed, Subject::LogOn)?,
        Resolver::start(bed, Subject::LogOff)?,
        Resolver::start(bed, Subject::Upstream)?,
    ];
    let mem = ring_memory(&rs[0])?;
    let tops: Vec<(f64, f64)> = (0..5)
        .map(|_| Ok((top_ms(&rs[0], "names")?, top_ms(&rs[0], "clients")?)))
        .collect::<Result<_>>()?;
    let mut s = Samples::default();
    for i in 0..runs {
        one_run(&rs, i, seconds, &mut s)?;
    }
    let status = rs[0].get("/query-log/status")?;
    let stall_runs: Vec<Stall> = (0..stalls)
        .map(|i| stall(&rs[0], i))
        .collect::<Result<_>>()?;
    let [on, off, upstream] = rs;
    on.stop()?;
    off.stop()?;
    upstream.stop()?;
    report(&s, runs, seconds, &mem, &tops, &status);
    report_stalls(&stall_runs);
    Ok(())
}

/// Queries per second of the stall runs.
const STALL_RATE: u32 = 2000;

/// Each phase of a stall run.
const PHASE: Duration = Duration::from_secs(10);

/// The phases of a stall run, in order.
const PHASES: [&str; 4] = [
    "reader running",
    "reader stopped (SIGSTOP)",
    "reader resumed (SIGCONT)",
    "reader killed, restarted",
];

/// One stall run's figures.
struct Stall {
    /// The latency of the answers to the queries sent in each phase (the first second of
    /// the load left out).
    phases: [Option<Percentiles>; 4],
    /// The whole load.
    load: LoadReport,
    /// The query log's `missed` grew by this from the start to the kill (the stop's cost).
    missed: u64,
    /// From the kill to the first answer the new reader logged.
    back_after: Option<Duration>,
}

/// The manager process now (it changes when it is killed).
fn manager_pid(r: &Resolver) -> Option<i32> {
    r.launched
        .descendants()
        .into_iter()
        .find(|p| p.comm == "kres-manager")
        .map(|p| p.pid)
}

/// Wait until the load has run `until` from its start.
fn run_until(load: &Load, until: Duration) {
    while load.elapsed() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One stall run on the resolver with the query log on: an open loop of [`STALL_RATE`] q/s
/// through four phases of [`PHASE`]: the reader running, stopped, resumed, killed.
fn stall(on: &Resolver, i: usize) -> Result<Stall> {
    let pid = manager_pid(on).context("no manager process")?;
    let missed_before = on.get("/query-log/status")?["missed"].as_u64().unwrap_or(0);
    let mut spec = LoadSpec::new(on.server, STALL_RATE, QNAME);
    spec.max_duration = PHASE * 4 + Duration::from_secs(1);
    spec.max_queries = u64::from(STALL_RATE) * spec.max_duration.as_secs();
    let load = Load::start(spec)?;
    let start = Duration::from_secs(1);
    run_until(&load, start + PHASE);
    kill(Pid::from_raw(pid), Signal::SIGSTOP)?;
    run_until(&load, start + PHASE * 2);
    kill(Pid::from_raw(pid), Signal::SIGCONT)?;
    run_until(&load, start + PHASE * 3);
    // What the stop cost the log, counted by the reader that was stopped.
    let missed = on.get("/query-log/status")?["missed"]
        .as_u64()
        .unwrap_or(0)
        .saturating_sub(missed_before);
    kill(Pid::from_raw(pid), Signal::SIGKILL)?;
    let killed = Instant::now();
    // The batches are back when the new reader has logged an answer.
    let mut back_after = None;
    while load.elapsed() < start + PHASE * 4 {
        if back_after.is_none() {
            let received = manager_pid(on)
                .filter(|&p| p != pid)
                .and_then(|_| on.get("/query-log/status").ok())
                .and_then(|s| s["received"].as_u64());
            if received.is_some_and(|n| n > 0) {
                back_after = Some(killed.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let load = load.stop();
    let phases = std::array::from_fn(|k| {
        let from = start + PHASE * k as u32;
        load.latency(from, from + PHASE)
    });
    eprintln!(
        "stall run {}: {load}; missed +{missed} by the stop; batches back {back_after:.2?} after it",
        i + 1
    );
    for (name, p) in PHASES.iter().zip(&phases) {
        eprintln!(
            "  {name}: {}",
            p.map_or("no answers".into(), |p| p.to_string())
        );
    }
    Ok(Stall {
        phases,
        load,
        missed,
        back_after,
    })
}

fn report_stalls(runs: &[Stall]) {
    if runs.is_empty() {
        return;
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let m = |f: &dyn Fn(&Percentiles) -> Duration, k: usize| {
        median(
            runs.iter()
                .filter_map(|r| r.phases[k].as_ref())
                .map(|p| ms(f(p)))
                .collect(),
        )
    };
    println!(
        "answer latency at {STALL_RATE} q/s (open loop), {} runs of 4 phases of {:?} (medians)",
        runs.len(),
        PHASE
    );
    println!(
        "{:<40} {:>10} {:>10} {:>10} {:>10}",
        "phase", "p50 ms", "p99 ms", "p99.9 ms", "max ms"
    );
    for (k, name) in PHASES.iter().enumerate() {
        println!(
            "{:<40} {:>10.3} {:>10.3} {:>10.3} {:>10.3}",
            name,
            m(&|p| p.p50, k),
            m(&|p| p.p99, k),
            m(&|p| p.p999, k),
            m(&|p| p.max, k)
        );
    }
    let p99 = |k: usize| m(&|p| p.p99, k);
    println!(
        "  p99 stopped - running: {:+.3} ms; resumed - running: {:+.3} ms; killed - running: \
         {:+.3} ms",
        p99(1) - p99(0),
        p99(2) - p99(0),
        p99(3) - p99(0)
    );
    let lost: Vec<String> = runs.iter().map(|r| r.load.lost.to_string()).collect();
    let missed: Vec<String> = runs.iter().map(|r| r.missed.to_string()).collect();
    let back: Vec<String> = runs
        .iter()
        .map(|r| {
            r.back_after
                .map_or("never".into(), |d| format!("{:.0} ms", ms(d)))
        })
        .collect();
    println!(
        "  queries lost per run: {}; log entries missed (counted) by the stop: \
         {}; batches back after the kill: {}",
        lost.join(", "),
        missed.join(", "),
        back.join(", ")
    );
}

fn report(
    s: &Samples,
    runs: usize,
    seconds: f64,
    mem: &[(u64, u64, u64); 3],
    tops: &[(f64, f64)],
    status: &Value,
) {
    let m = |v: &[f64]| median(v.to_vec());
    println!(
        "query log benchmark: {QNAME} A (local data), 1 worker each, {THREADS} sockets x \
         {WINDOW} in flight, {runs} runs of {seconds} s bursts, ring of {RING}"
    );
    println!(
        "{:<40} {:>14} {:>14} {:>14}",
        "metric (median)", "log on", "log off", "upstream"
    );
    println!(
        "{:<40} {:>14.0} {:>14.0} {:>14.0}",
        "answers per second",
        m(&s.qps[0]),
        m(&s.qps[1]),
        m(&s.qps[2])
    );
    println!(
        "{:<40} {:>14.2} {:>14.2} {:>14.2}",
        "kresd CPU per answer (us)",
        m(&s.kresd_cpu_us[0]),
        m(&s.kresd_cpu_us[1]),
        m(&s.kresd_cpu_us[2])
    );
    println!(
        "{:<40} {:>14.1} {:>14.1}",
        "manager CPU per 100k answers (ms)",
        m(&s.manager_cpu_ms[0]),
        m(&s.manager_cpu_ms[1])
    );
    println!(
        "  on/off q/s: {:.3}x (medians), {:.3}x (median of paired ratios); off/upstream: \
         {:.3}x (medians), {:.3}x (median of paired ratios)",
        m(&s.qps[0]) / m(&s.qps[1]),
        m(&s.on_over_off),
        m(&s.qps[1]) / m(&s.qps[2]),
        m(&s.off_over_upstream)
    );
    println!(
        "  the reader's CPU per 100k answers: {:.1} ms (the manager's with the log on, less \
         with it off)",
        m(&s.manager_cpu_ms[0]) - m(&s.manager_cpu_ms[1])
    );
    let [empty, ten, full] = mem;
    for (what, at) in [("10k", ten), ("100k", full)] {
        println!(
            "  the ring's memory at {what} ({} entries held, {} before): manager RSS +{} KiB, \
             PSS +{} KiB",
            at.0,
            empty.0,
            at.1.saturating_sub(empty.1),
            at.2.saturating_sub(empty.2)
        );
    }
    let names: Vec<f64> = tops.iter().map(|t| t.0).collect();
    let clients: Vec<f64> = tops.iter().map(|t| t.1).collect();
    println!(
        "  kresctl top over {RING} entries: names {:.1} ms, clients {:.1} ms (median of {})",
        m(&names),
        m(&clients),
        tops.len()
    );
    println!(
        "  query log after the bursts: received {}, missed {} (the workers drop what the \
         reader does not take in time)",
        status["received"], status["missed"]
    );
}
