//! Start-up and shutdown of the whole resolver, ours against upstream's, in runs whose order
//! rotates: launch → READY=1 on the notify socket, launch → first DNS answer, control-plane
//! RSS and PSS after READY, SIGINT → every process gone. Ours runs twice a run: with the
//! query log off, and with it on (`monitoring.query-log`, its default ring), where the PSS is
//! measured again after the API's first request and once the ring is full of distinct names (`fN.fill.test.`, asked until the
//! log holds its capacity). Prints medians side by side.
//!
//! With `BENCH_SMAPS_DIR=DIR`, each control-plane process's `smaps` after READY (after the
//! ring is full, with the log on) is copied under `DIR/ours`, `DIR/ours-log-on` and
//! `DIR/upstream` (the last run's wins).
//!
//! Usage: bash bench/run.sh startup [RUNS] [WORKERS]   (defaults: 5 runs, 1 worker)

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bench::{
    answers_a, control_plane_pss_kib, control_plane_rss_kib, launch, print_header, print_row,
    until, write_config, Flavor, FILL_RULES,
};
use nix::sys::signal::Signal;
use testbed::Bed;

/// Where to copy the control plane's `/proc/PID/smaps` after READY, when set.
const SMAPS_VAR: &str = "BENCH_SMAPS_DIR";

/// The three subjects of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subject {
    /// Ours, the query log off (the default).
    Ours,
    /// Ours, the query log on with its default ring.
    OursLogOn,
    Upstream,
}

impl Subject {
    const ALL: [Subject; 3] = [Subject::Ours, Subject::OursLogOn, Subject::Upstream];

    fn label(self) -> &'static str {
        match self {
            Subject::Ours => "ours",
            Subject::OursLogOn => "ours-log-on",
            Subject::Upstream => "upstream",
        }
    }

    fn flavor(self) -> Flavor {
        match self {
            Subject::Ours | Subject::OursLogOn => Flavor::Ours,
            Subject::Upstream => Flavor::Upstream,
        }
    }
}

#[derive(Default)]
struct Samples {
    ready_ms: Vec<f64>,
    first_answer_ms: Vec<f64>,
    rss_mib: Vec<f64>,
    pss_mib: Vec<f64>,
    /// With the log on: PSS after the API's first request (`GET /query-log/status`), the ring
    /// still empty: what serving one request maps of the program's text.
    first_request_pss_mib: Vec<f64>,
    /// With the log on: PSS once the ring is full of distinct names.
    full_ring_pss_mib: Vec<f64>,
    /// With the log on: the entries the full ring held.
    full_ring_held: Vec<f64>,
    stop_ms: Vec<f64>,
}

fn one_run(bed: &Bed, subject: Subject, workers: u32, samples: &mut Samples) -> Result<()> {
    let dir = bed.test_dir(&format!("bench-startup-{}", subject.label()))?;
    let port = testbed::free_port()?;
    let extra = match subject {
        Subject::OursLogOn => format!("{FILL_RULES}monitoring:\n  query-log:\n    enabled: true\n"),
        Subject::Ours | Subject::Upstream => FILL_RULES.to_owned(),
    };
    write_config(&dir, port, workers, &extra)?;
    let server = SocketAddr::from(([127, 0, 0, 1], port));
    let t0 = Instant::now();
    let (mut launched, mut notify) = launch(bed, subject.flavor(), &dir)?;
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
    if subject == Subject::OursLogOn {
        let api = dir.host("run/kres-api.sock");
        let capacity = bench::query_log_status(&api)?["capacity"]
            .as_u64()
            .context("the ring's capacity")?;
        samples
            .first_request_pss_mib
            .push(control_plane_pss_kib(&launched) as f64 / 1024.0);
        let status = bench::fill_query_log(server, &api, &mut 0, capacity)?;
        let held = status["held"].as_u64().unwrap_or(0);
        samples.full_ring_held.push(held as f64);
        samples
            .full_ring_pss_mib
            .push(control_plane_pss_kib(&launched) as f64 / 1024.0);
    }
    if let Some(into) = std::env::var_os(SMAPS_VAR) {
        let into = std::path::Path::new(&into).join(subject.label());
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
    let workers: u32 = bench::positional(&mut args, "WORKERS", 1)?;
    let bed = Bed::get()?;
    let mut samples: [Samples; 3] = Default::default();
    for i in 0..runs {
        // The order rotates so that drift affects every subject alike.
        for k in 0..Subject::ALL.len() {
            let at = (i + k) % Subject::ALL.len();
            one_run(bed, Subject::ALL[at], workers, &mut samples[at])?;
        }
        eprintln!("run {}/{} done", i + 1, runs);
    }
    let [ours, on, upstream] = &samples;
    println!("startup benchmark: {workers} workers, {runs} runs each, order rotating");
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
        "control-plane PSS after READY, log off",
        "MiB",
        &ours.pss_mib,
        &upstream.pss_mib,
    );
    print_row(
        "control-plane PSS after READY, log on",
        "MiB",
        &on.pss_mib,
        &upstream.pss_mib,
    );
    print_row(
        "  log on, after the API's first request",
        "MiB",
        &on.first_request_pss_mib,
        &upstream.pss_mib,
    );
    print_row(
        &format!(
            "  log on, ring full ({:.0} names)",
            bench::median(on.full_ring_held.clone())
        ),
        "MiB",
        &on.full_ring_pss_mib,
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
