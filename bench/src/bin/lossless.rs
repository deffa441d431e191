//! Queries lost while workers restart, ours against upstream's manager on the same UDP load
//! (the test bed's load generator, 4000 queries/s from 16 source ports on loopback): over three
//! rolling restarts of 2 workers (`POST /renew/force`), and per SIGKILL of the only worker.
//! Ours keeps the listening sockets open in the daemon; upstream's kresd binds its own, which
//! close with the process.
//!
//! Usage: cargo build --release --bins && target/release/lossless [KILLS]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use bench::{launch, print_header, print_row, until, write_config, Flavor};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use testbed::load::{Load, LoadReport, LoadSpec};
use testbed::{http, Bed, Launched};

/// Queries per second.
const RATE: u32 = 4000;

/// A heavier load for the rolling restarts, closer to what one loopback client can send.
const FAST_RATE: u32 = 20000;

/// Longer than our supervisor's stable period, so every crash hits a stable worker.
const SPACING: Duration = Duration::from_secs(6);

fn kresd_pids(launched: &Launched) -> Vec<i32> {
    let mut v: Vec<i32> = launched
        .descendants()
        .into_iter()
        .filter(|p| p.comm == "kresd")
        .map(|p| p.pid)
        .collect();
    v.sort_unstable();
    v
}

fn load(server: SocketAddr, rate: u32) -> Result<Load> {
    Load::start(LoadSpec::new(server, rate, "bench.test."))
}

/// Queries lost over three rolling restarts of 2 workers at `rate` queries per second.
fn rolling(bed: &Bed, flavor: Flavor, rate: u32) -> Result<LoadReport> {
    let dir = bed.test_dir(&format!("loss-r-{}", flavor.label()))?;
    let port = testbed::free_port()?;
    write_config(&dir, port, 2, "")?;
    let (mut launched, mut notify) = launch(bed, flavor, &dir)?;
    notify.wait_for("READY=1", Duration::from_secs(300))?;
    let api = dir.host("run/kres-api.sock");
    let load = load(SocketAddr::from(([127, 0, 0, 1], port)), rate)?;
    ensure!(
        load.wait_answers(2000, Duration::from_secs(30)),
        "no answers"
    );
    for round in 0..3 {
        let before = kresd_pids(&launched);
        let resp = http::request(&api, "POST", "/renew/force", &[], b"")?;
        ensure!(
            resp.status == 200,
            "renew {round}: {} {}",
            resp.status,
            resp.text()
        );
        // Every worker replaced (upstream's reply may come before its restarts finish).
        until(Instant::now(), Duration::from_secs(120), || {
            let now = kresd_pids(&launched);
            (now.len() == before.len() && now.iter().all(|p| !before.contains(p))).then_some(())
        })
        .with_context(|| format!("renew {round}: workers not replaced"))?;
        ensure!(
            load.wait_answers(2000, Duration::from_secs(30)),
            "round {round}"
        );
    }
    let report = load.stop();
    launched.signal(Signal::SIGINT)?;
    let _ = launched.wait(Duration::from_secs(120));
    Ok(report)
}

/// Queries lost per SIGKILL of the only worker.
fn crashes(bed: &Bed, flavor: Flavor, kills: usize) -> Result<(Vec<f64>, LoadReport)> {
    let dir = bed.test_dir(&format!("loss-c-{}", flavor.label()))?;
    let port = testbed::free_port()?;
    write_config(&dir, port, 1, "")?;
    let (mut launched, mut notify) = launch(bed, flavor, &dir)?;
    notify.wait_for("READY=1", Duration::from_secs(300))?;
    let load = load(SocketAddr::from(([127, 0, 0, 1], port)), RATE)?;
    ensure!(
        load.wait_answers(2000, Duration::from_secs(30)),
        "no answers"
    );
    let mut kill_times = Vec::new();
    for round in 0..kills {
        std::thread::sleep(SPACING);
        let old = kresd_pids(&launched);
        ensure!(old.len() == 1, "expected one kresd: {old:?}");
        kill_times.push(load.elapsed());
        kill(Pid::from_raw(old[0]), Signal::SIGKILL)?;
        until(Instant::now(), Duration::from_secs(120), || {
            let now = kresd_pids(&launched);
            (now.len() == 1 && now != old).then_some(())
        })
        .with_context(|| format!("crash {round}: no new worker"))?;
        ensure!(
            load.wait_answers(2000, Duration::from_secs(60)),
            "round {round}"
        );
    }
    let report = load.stop();
    launched.signal(Signal::SIGINT)?;
    let _ = launched.wait(Duration::from_secs(120));
    // Each loss is charged to the last kill before it was sent (or to the first, if earlier).
    let mut per_kill = vec![0.0; kills];
    for at in &report.lost_at {
        let i = kill_times
            .iter()
            .rposition(|t| *t <= *at + Duration::from_secs(1));
        per_kill[i.unwrap_or(0)] += 1.0;
    }
    Ok((per_kill, report))
}

fn main() -> Result<()> {
    let kills: usize = bench::positional(&mut std::env::args().skip(1), "KILLS", 5)?;
    let bed = Bed::get()?;
    let mut rows = Vec::new();
    for flavor in [Flavor::Ours, Flavor::Upstream] {
        let r = rolling(bed, flavor, RATE)?;
        println!("{} rolling at {RATE}/s: {r}", flavor.label());
        let fast = rolling(bed, flavor, FAST_RATE)?;
        println!("{} rolling at {FAST_RATE}/s: {fast}", flavor.label());
        let (per_kill, c) = crashes(bed, flavor, kills)?;
        println!(
            "{} crashes: {c}\n  lost per crash: {per_kill:?}",
            flavor.label()
        );
        rows.push((r.lost as f64, fast.lost as f64, per_kill));
    }
    println!("lossless benchmark: UDP load {RATE}/s (and {FAST_RATE}/s), 16 source ports");
    print_header();
    print_row(
        "lost over 3 rolling restarts, 2 workers",
        "qry",
        &[rows[0].0],
        &[rows[1].0],
    );
    print_row(
        "  same at 20000 queries/s",
        "qry",
        &[rows[0].1],
        &[rows[1].1],
    );
    print_row(
        "lost per kill -9 of the only worker",
        "qry",
        &rows[0].2,
        &rows[1].2,
    );
    Ok(())
}
