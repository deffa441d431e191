//! Crash recovery: with a single kresd worker, SIGKILL it and measure the time until DNS is
//! answered again, ours against upstream's (supervisord's autorestart). Kills are spaced so
//! each crash hits a worker that had been running stably.
//!
//! Usage: cargo build --release --bins && target/release/worker_crash [KILLS]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bench::{answers_a, launch, print_header, print_row, until, write_config, Flavor};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use testbed::Bed;

/// Longer than the stable period after which our supervisor forgives earlier failures.
const SPACING: Duration = Duration::from_secs(6);

fn kresd_pid(launched: &testbed::Launched) -> Option<i32> {
    launched
        .descendants()
        .into_iter()
        .find(|p| p.comm == "kresd")
        .map(|p| p.pid)
}

fn run(bed: &Bed, flavor: Flavor, kills: usize) -> Result<Vec<f64>> {
    let dir = bed.test_dir(&format!("bench-crash-{}", flavor.label()))?;
    let port = testbed::free_port()?;
    write_config(&dir, port, 1, "")?;
    let server = SocketAddr::from(([127, 0, 0, 1], port));
    let (mut launched, mut notify) = launch(bed, flavor, &dir)?;
    notify.wait_for("READY=1", Duration::from_secs(120))?;
    let mut samples = Vec::new();
    for _ in 0..kills {
        std::thread::sleep(SPACING);
        let old = kresd_pid(&launched).context("no kresd")?;
        let t0 = Instant::now();
        kill(Pid::from_raw(old), Signal::SIGKILL)?;
        let (elapsed, ()) = until(t0, Duration::from_secs(60), || {
            answers_a(server, "bench.test.", Duration::from_millis(5)).then_some(())
        })?;
        samples.push(elapsed.as_secs_f64() * 1000.0);
        // The new worker must be a different process.
        until(Instant::now(), Duration::from_secs(60), || {
            kresd_pid(&launched).filter(|p| *p != old)
        })?;
    }
    launched.signal(Signal::SIGINT)?;
    let _ = launched.wait(Duration::from_secs(60));
    Ok(samples)
}

fn main() -> Result<()> {
    let kills: usize = bench::positional(&mut std::env::args().skip(1), "KILLS", 5)?;
    let bed = Bed::get()?;
    let ours = run(bed, Flavor::Ours, kills)?;
    let upstream = run(bed, Flavor::Upstream, kills)?;
    println!("worker crash benchmark: 1 worker, SIGKILL, {kills} crashes each");
    println!("ours: {ours:.1?}\nupstream: {upstream:.1?}");
    print_header();
    print_row(
        "kill -9 of the only kresd -> DNS answered",
        "ms",
        &ours,
        &upstream,
    );
    Ok(())
}
