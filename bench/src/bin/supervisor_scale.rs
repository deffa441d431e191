//! Scale of the supervisor alone, without kresd: the resident memory of a control plane that
//! supervises 2, 16 and 64 trivial notify children (the `misbehave` helper sending READY=1 and
//! then blocking), and the time from starting all of them at once to all being ready.
//!
//! Each run is a fresh process (this binary re-executed with `--one-run N`), so that runs
//! share no allocator state; the rounds alternate the child counts so that drift affects all
//! alike. Prints medians. Goals: at most 8 MiB with 16 children, at most 100 ms for 64 to be
//! ready. The figures are reported, never asserted.
//!
//! Usage: cargo build --release -p supervisor --bins &&
//!        cargo run --release -p bench --bin supervisor_scale [RUNS]

use std::ffi::OsString;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bench::{median, our_binary};
use supervisor::{Readiness, ServiceSpec, Supervisor, SupervisorOptions};

/// The child counts measured.
const COUNTS: [usize; 3] = [2, 16, 64];

/// What one run measured.
struct Sample {
    rss_kib: u64,
    /// From the first start command until every child was spawned (the supervisor's share).
    spawned_ms: f64,
    /// From the first start command until every child had sent READY=1.
    ready_ms: f64,
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("--one-run") => {
            let n: usize = args
                .next()
                .and_then(|a| a.parse().ok())
                .context("--one-run N")?;
            let sample = one_run(n)?;
            println!(
                "{} {} {}",
                sample.rss_kib, sample.spawned_ms, sample.ready_ms
            );
            Ok(())
        }
        runs => {
            let runs: usize = runs.map_or(Ok(7), |r| bench::number(r, "RUNS"))?;
            drive(runs.max(5))
        }
    }
}

/// Run every count `runs` times, each in a fresh process, and print the medians.
fn drive(runs: usize) -> Result<()> {
    // Fail early, with the build hint, if the helper is missing.
    our_binary("misbehave")?;
    let me = std::env::current_exe()?;
    let mut samples: Vec<Vec<Sample>> = COUNTS.iter().map(|_| Vec::new()).collect();
    for round in 0..runs {
        for i in 0..COUNTS.len() {
            // Rotate the order each round.
            let i = (i + round) % COUNTS.len();
            let out = Command::new(&me)
                .args(["--one-run", &COUNTS[i].to_string()])
                .output()?;
            if !out.status.success() {
                bail!(
                    "run with {} children failed: {}",
                    COUNTS[i],
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            let text = String::from_utf8_lossy(&out.stdout);
            let mut fields = text.split_whitespace();
            let rss_kib = fields.next().and_then(|f| f.parse().ok());
            let spawned_ms = fields.next().and_then(|f| f.parse().ok());
            let ready_ms = fields.next().and_then(|f| f.parse().ok());
            let (Some(rss_kib), Some(spawned_ms), Some(ready_ms)) = (rss_kib, spawned_ms, ready_ms)
            else {
                bail!("unexpected output of a run: {text:?}");
            };
            samples[i].push(Sample {
                rss_kib,
                spawned_ms,
                ready_ms,
            });
        }
        eprintln!("round {}/{runs} done", round + 1);
    }
    println!("supervisor scale: medians of {runs} runs, each in a fresh process");
    println!(
        "{:>9} {:>22} {:>22} {:>22}",
        "children", "control-plane RSS MiB", "start -> all spawned ms", "start -> all ready ms"
    );
    for (n, s) in COUNTS.iter().zip(&samples) {
        let rss = median(s.iter().map(|x| x.rss_kib as f64 / 1024.0).collect());
        let spawned = median(s.iter().map(|x| x.spawned_ms).collect());
        let ready = median(s.iter().map(|x| x.ready_ms).collect());
        println!("{n:>9} {rss:>22.2} {spawned:>22.1} {ready:>22.1}");
    }
    println!("goals: <= 8 MiB with 16 children; <= 100 ms for 64 children to be ready");
    Ok(())
}

/// Supervise `n` notify children in this process: start them all at once, wait until every
/// one is ready, then measure our own resident memory and stop them.
fn one_run(n: usize) -> Result<Sample> {
    let helper = our_binary("misbehave")?;
    let dir = std::env::temp_dir().join(format!("supervisor-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // The same runtime the daemon uses: current-thread.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(async {
        let (sup, actor) = Supervisor::start(SupervisorOptions {
            notify_socket: dir.join("notify.sock"),
            notify_senders: None,
            line_levels: supervisor::output::levels_by_stream,
        })?;
        for i in 0..n {
            let argv: Vec<OsString> = vec![
                helper.clone().into(),
                "notify".into(),
                "READY=1".into(),
                "wait".into(),
            ];
            let mut spec = ServiceSpec::new(format!("child{i}"), "bench", argv);
            spec.readiness = Readiness::Notify {
                timeout: Duration::from_secs(30),
            };
            sup.add(spec, Vec::new()).await?;
        }
        // Every child has a pid in the process table once the supervisor has spawned it.
        let mut table = sup.subscribe();
        let all_spawned = tokio::spawn(async move {
            let _ = table
                .wait_for(|s| s.processes.iter().all(|p| p.pid.is_some()))
                .await;
            Instant::now()
        });
        let t0 = Instant::now();
        let mut starts = tokio::task::JoinSet::new();
        for i in 0..n {
            let sup = sup.clone();
            starts.spawn(async move { sup.start(&format!("child{i}")).await });
        }
        while let Some(started) = starts.join_next().await {
            started??;
        }
        let ready_ms = t0.elapsed().as_secs_f64() * 1000.0;
        let spawned_ms = (all_spawned.await? - t0).as_secs_f64() * 1000.0;
        let rss_kib = own_rss_kib()?;
        sup.shutdown().await?;
        let _ = actor.await;
        anyhow::Ok(Sample {
            rss_kib,
            spawned_ms,
            ready_ms,
        })
    });
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// `VmRSS` of this process, in KiB.
fn own_rss_kib() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS in /proc/self/status")
}
