//! Start-up and shutdown of the whole resolver, ours against upstream's, alternating runs:
//! launch → READY=1 on the notify socket, launch → first DNS answer, control-plane RSS after
//! READY, SIGINT → every process gone. Prints medians side by side.
//!
//! With `BENCH_SMAPS_DIR=DIR`, each control-plane process's `smaps` after READY is copied
//! under `DIR/ours` and `DIR/upstream` (the last run's wins). With `BENCH_QUERY_LOG=on`, ours
//! runs with `monitoring.query-log` on (upstream has no such log).
//!
//! Usage: cargo build --release --bins && cargo run --release -p bench --bin startup [RUNS] [WORKERS]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Result;
use bench::{
    answers_a, control_plane_pss_kib, control_plane_rss_kib, launch, print_header, print_row,
    until, write_config, Flavor,
};
use nix::sys::signal::Signal;
use testbed::Bed;

/// Where to copy the control plane's `/proc/PID/smaps` after READY, when set.
const SMAPS_VAR: &str = "BENCH_SMAPS_DIR";

/// `on`: our query log on.
const QUERY_LOG_VAR: &str = "BENCH_QUERY_LOG";

#[derive(Default)]
struct Samples {
    ready_ms: Vec<f64>,
    first_answer_ms: Vec<f64>,
    rss_mib: Vec<f64>,
    pss_mib: Vec<f64>,
    stop_ms: Vec<f64>,
}

fn one_run(bed: &Bed, flavor: Flavor, workers: u32, samples: &mut Samples) -> Result<()> {
    let dir = bed.test_dir(&format!("bench-startup-{}", flavor.label()))?;
    let port = testbed::free_port()?;
    let log_on = flavor == Flavor::Ours && std::env::var(QUERY_LOG_VAR).is_ok_and(|v| v == "on");
    let extra = if log_on {
        "monitoring:\n  query-log:\n    enabled: true\n"
    } else {
        ""
    };
    write_config(&dir, port, workers, extra)?;
    let server = SocketAddr::from(([127, 0, 0, 1], port));
    let t0 = Instant::now();
    let (mut launched, mut notify) = launch(bed, flavor, &dir)?;
    // The first answer is polled on its own thread while this one blocks on READY=1.
    let poller = std::thread::spawn(move || {
        until(t0, Duration::from_secs(120), || {
            answers_a(server, "bench.test.", Duration::from_millis(20)).then_some(())
        })
        .map(|(elapsed, _)| elapsed)
    });
    notify.wait_for("READY=1", Duration::from_secs(120))?;
    let ready_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let first = poller
        .join()
        .map_err(|_| anyhow::anyhow!("poller panicked"))??;
    let rss = control_plane_rss_kib(&launched);
    let pss = control_plane_pss_kib(&launched);
    if let Some(into) = std::env::var_os(SMAPS_VAR) {
        let into = std::path::Path::new(&into).join(flavor.label());
        bench::dump_control_plane_smaps(&launched, &into)?;
    }
    let t1 = Instant::now();
    launched.signal(Signal::SIGINT)?;
    let (stopped, _) = until(t1, Duration::from_secs(120), || {
        launched.tree().is_empty().then_some(())
    })?;
    let _ = launched.wait(Duration::from_secs(30));
    samples.ready_ms.push(ready_ms);
    samples.first_answer_ms.push(first.as_secs_f64() * 1000.0);
    samples.rss_mib.push(rss as f64 / 1024.0);
    samples.pss_mib.push(pss as f64 / 1024.0);
    samples.stop_ms.push(stopped.as_secs_f64() * 1000.0);
    let _ = std::fs::remove_dir_all(&dir.host);
    Ok(())
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let runs: usize = bench::positional(&mut args, "RUNS", 5)?;
    let workers: u32 = bench::positional(&mut args, "WORKERS", 2)?;
    let bed = Bed::get()?;
    let mut ours = Samples::default();
    let mut upstream = Samples::default();
    for i in 0..runs {
        // Alternate which goes first so drift affects both alike.
        let order = if i % 2 == 0 {
            [Flavor::Ours, Flavor::Upstream]
        } else {
            [Flavor::Upstream, Flavor::Ours]
        };
        for flavor in order {
            let s = if flavor == Flavor::Ours {
                &mut ours
            } else {
                &mut upstream
            };
            one_run(bed, flavor, workers, s)?;
        }
        eprintln!("run {}/{} done", i + 1, runs);
    }
    let log = std::env::var(QUERY_LOG_VAR).unwrap_or_else(|_| "off".to_owned());
    println!(
        "startup benchmark: {workers} workers, {runs} runs each, alternating; our query log {log}"
    );
    print_header();
    print_row(
        "launch -> READY=1",
        "ms",
        &ours.ready_ms,
        &upstream.ready_ms,
    );
    print_row(
        "launch -> first DNS answer",
        "ms",
        &ours.first_answer_ms,
        &upstream.first_answer_ms,
    );
    print_row(
        "control-plane RSS after READY",
        "MiB",
        &ours.rss_mib,
        &upstream.rss_mib,
    );
    print_row(
        "control-plane PSS after READY",
        "MiB",
        &ours.pss_mib,
        &upstream.pss_mib,
    );
    print_row(
        "SIGINT -> every process gone",
        "ms",
        &ours.stop_ms,
        &upstream.stop_ms,
    );
    Ok(())
}
