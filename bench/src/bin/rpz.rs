//! RPZ by zone transfer against RPZ by file: the time from a change at the primary until a
//! newly listed name is blocked by kresd, for zones of 10,000 and 1,000,000 entries.
//!
//! - transfer: our resolver is a secondary of knotd (TSIG, NOTIFY to our listener); a change
//!   is made at knotd (`zone-reload` of one more entry: its NOTIFY goes out, we IXFR, store,
//!   renew) and timed from the moment knotd serves the new serial until kresd answers the new
//!   name NXDOMAIN.
//! - file + watchdog: the same zone, as knotd has it, in a file with `watchdog: true`; the file
//!   is replaced atomically with one more entry and timed until kresd answers NXDOMAIN.
//!
//! Both resolvers run our release build (the file way is the same for upstream's manager,
//! whose watchdog does not see atomic replacements). Prints medians; asserts nothing about
//! timings.
//!
//! Usage: cargo build --release --bins && target/release/rpz [--sizes 10000,1000000] [--runs N]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bench::{launch, median, until, Flavor};
use testbed::knot::{KeySetup, KnotPrimary, PrimarySetup};
use testbed::{Bed, Launched, TestDir};

/// Generous bounds for one step on a loaded 2-core machine; never a performance assertion.
const STEP_TIMEOUT: Duration = Duration::from_secs(900);

const ZONE: &str = "bench.rpz.";

/// Whether kresd at `server` answers `name` NXDOMAIN (blocked by an RPZ `CNAME .` entry).
/// The names timed are not under `.test`, which kresd answers NXDOMAIN by itself.
fn blocked(server: SocketAddr, name: &str) -> bool {
    testbed::dns::query_udp(server, name, testbed::dns::TYPE_A, Duration::from_secs(2))
        .is_ok_and(|r| r.rcode == 3)
}

/// Seconds from `since` until `name` (relative) is blocked at `server`.
fn seconds_until_blocked(server: SocketAddr, name: &str, since: Instant) -> Result<f64> {
    let absolute = format!("{name}.");
    let (took, ()) = until(since, STEP_TIMEOUT, || {
        blocked(server, &absolute).then_some(())
    })?;
    Ok(took.as_secs_f64())
}

/// A resolver of ours running `rpz` (a `local-data` section) in `dir`; returns once READY,
/// with the seconds it took.
fn resolver(bed: &Bed, dir: &TestDir, rpz: &str) -> Result<(Launched, SocketAddr, f64)> {
    let port = testbed::free_port()?;
    // `write_config` ends with `local-data:` and its records: the RPZ goes beside them.
    bench::write_config(dir, port, 1, rpz)?;
    let t0 = Instant::now();
    let (launched, mut notify) = launch(bed, Flavor::Ours, dir)?;
    // In slices, so that a resolver that gave up is reported at once.
    let (_, ready) = until(t0, STEP_TIMEOUT, || {
        if launched.tree().is_empty() {
            return Some(false);
        }
        let ready = notify.wait_for("READY=1", Duration::from_millis(250));
        ready.is_ok().then_some(true)
    })
    .with_context(|| format!("READY: {}", launched.output.text()))?;
    anyhow::ensure!(ready, "exited before READY: {}", launched.output.text());
    let ready = t0.elapsed().as_secs_f64();
    Ok((launched, SocketAddr::from(([127, 0, 0, 1], port)), ready))
}

/// Seconds from each change at the primary until its new entry is blocked, and of the
/// start (its first transfer, AXFR) to READY.
fn transfer_runs(bed: &Bed, entries: usize, runs: usize) -> Result<(Vec<f64>, f64)> {
    let dir = bed.test_dir("bench-rpz-transfer")?;
    std::fs::create_dir_all(dir.host("zones"))?;
    let notify_port = testbed::free_port()?;
    let mut primary = KnotPrimary::start(
        bed,
        PrimarySetup {
            zone: ZONE.into(),
            entries,
            key: KeySetup::Generated,
            notify: Some(SocketAddr::from(([127, 0, 0, 1], notify_port))),
        },
    )?;
    primary.write_key_file(&dir.host("xfr.key"))?;
    let rpz = format!(
        "  rpz:\n    - file: {}\n      transfer:\n        zone: {ZONE}\n        primaries: [\"127.0.0.1@{}\"]\n        tsig-key-file: {}\n        notify-listen: 127.0.0.1@{notify_port}\n        first-transfer-timeout: 15m\n",
        dir.bed("zones/bench.rpz").display(),
        primary.port(),
        dir.bed("xfr.key").display(),
    );
    let (mut launched, server, ready) = resolver(bed, &dir, &rpz)?;
    let mut times = Vec::new();
    let mut changed: Option<Instant> = None;
    for run in 0..runs {
        // A zone is refreshed at most once per interval: a change sooner after the last
        // would time the pacing, not the transfer.
        if let Some(at) = changed {
            let next = at + kres_daemon::rpz::pacing::REFRESH_INTERVAL;
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
        let name = format!("transfer{run}.blocked-by-rpz.net");
        changed = Some(Instant::now());
        primary.bump(&[&name], &[])?;
        times.push(seconds_until_blocked(server, &name, Instant::now())?);
    }
    launched.signal(nix::sys::signal::Signal::SIGINT)?;
    launched.wait(STEP_TIMEOUT)?;
    Ok((times, ready))
}

/// Seconds from each atomic replacement of the watched file until its new entry is blocked,
/// and of the start (the file read) to READY.
fn watchdog_runs(bed: &Bed, entries: usize, runs: usize) -> Result<(Vec<f64>, f64)> {
    let dir = bed.test_dir("bench-rpz-watchdog")?;
    std::fs::create_dir_all(dir.host("zones"))?;
    let zone = dir.host("zones/bench.rpz");
    let mut text =
        format!("{ZONE} 3600 IN SOA primary.{ZONE} hostmaster.{ZONE} 1 300 60 86400 60\n");
    for i in 0..entries {
        text.push_str(&format!("n{i}.blocked.test.{ZONE} 3600 IN CNAME .\n"));
    }
    testbed::write(&zone, &text)?;
    let rpz = format!(
        "  rpz:\n    - file: {}\n      watchdog: true\n",
        dir.bed("zones/bench.rpz").display()
    );
    let (mut launched, server, ready) = resolver(bed, &dir, &rpz)?;
    let mut times = Vec::new();
    for run in 0..runs {
        let name = format!("watched{run}.blocked-by-rpz.net");
        text.push_str(&format!("{name}.{ZONE} 3600 IN CNAME .\n"));
        let tmp = zone.with_extension("tmp");
        testbed::write(&tmp, &text)?;
        let t0 = Instant::now();
        std::fs::rename(&tmp, &zone)?;
        times.push(seconds_until_blocked(server, &name, t0)?);
    }
    launched.signal(nix::sys::signal::Signal::SIGINT)?;
    launched.wait(STEP_TIMEOUT)?;
    Ok((times, ready))
}

/// `--sizes a,b` and `--runs n` from the command line.
fn arguments() -> Result<(Vec<usize>, usize)> {
    let mut sizes = vec![10_000, 1_000_000];
    let mut runs = 5;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().context("a value after each option")?;
        match arg.as_str() {
            "--sizes" => {
                sizes = value.split(',').map(str::parse).collect::<Result<_, _>>()?;
            }
            "--runs" => runs = value.parse()?,
            other => anyhow::bail!("unknown option {other}"),
        }
    }
    Ok((sizes, runs))
}

fn main() -> Result<()> {
    let (sizes, runs) = arguments()?;
    let bed = Bed::get()?;
    println!(
        "{:<36} {:>12} {:>12}",
        "change → newly listed name blocked", "transfer", "file+watch"
    );
    for entries in sizes {
        let (transfer, transfer_ready) = transfer_runs(bed, entries, runs)?;
        let (watchdog, watchdog_ready) = watchdog_runs(bed, entries, runs)?;
        println!(
            "{:<36} {:>11.3}s {:>11.3}s   (medians of {runs})",
            format!("{entries} entries"),
            median(transfer),
            median(watchdog)
        );
        println!(
            "{:<36} {:>11.3}s {:>11.3}s",
            "  start to READY (first AXFR | file)", transfer_ready, watchdog_ready
        );
    }
    Ok(())
}
