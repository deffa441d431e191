//! Large configurations, ours against upstream's in the same run: `local-data` with 1k / 10k /
//! 100k addresses and records inline, a hosts file of 1M lines and an RPZ of 1M rules. For
//! each: `kresctl validate`, cold start to READY, `GET /v1/config`, and a policy-only change
//! (a PUT of one more record, until DNS answers it). Inputs are generated in the test bed at
//! run time, deterministically. Prints medians and ratios; asserts nothing about timings.
//!
//! kresd's own share is timed too, with no manager at all: the policy-loader Lua of the same
//! configuration run by kresd to completion, and one worker from launch to its READY. Their
//! sum is the floor of a cold start, the policy-loader alone that of a policy-only change. They
//! run right after ours in each run, and the table gives the median of the runs' differences:
//! our time above each floor in the same state of the machine.
//!
//! Usage: cargo build --release --bins && target/release/scale [--sizes 1000,10000] [--runs N]
//!        [--files] (the 1M-line hosts file and RPZ too)
//!        [--mixed] (instead of either alone, N addresses and N records in one configuration)

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use bench::{answers_a, launch, print_header, print_row, until, Flavor};
use testbed::{Bed, TestDir};

/// Generous bounds for one step on a loaded 2-core machine; never a performance assertion.
const START_TIMEOUT: Duration = Duration::from_secs(600);
const STEP_TIMEOUT: Duration = Duration::from_secs(600);

/// What fills `local-data`.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// `addresses:` with `n` names.
    Addresses(usize),
    /// `records:` with `n` lines of zone data.
    Records(usize),
    /// Both: `n` addresses and `n` records.
    Mixed(usize),
    /// `addresses-files:` naming a hosts file of `n` lines.
    HostsFile(usize),
    /// `rpz:` naming a zone of `n` rules.
    Rpz(usize),
}

impl Shape {
    fn label(self) -> String {
        match self {
            Shape::Addresses(n) => format!("{} addresses", count(n)),
            Shape::Records(n) => format!("{} records", count(n)),
            Shape::Mixed(n) => format!("{} records + {0} addresses", count(n)),
            Shape::HostsFile(n) => format!("hosts file of {} lines", count(n)),
            Shape::Rpz(n) => format!("RPZ of {} rules", count(n)),
        }
    }
}

fn count(n: usize) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1000 && n % 1000 == 0 => format!("{}k", n / 1000),
        n => n.to_string(),
    }
}

fn ip(i: usize) -> String {
    format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255)
}

/// Write the configuration (and the data file it names) into `dir`.
fn write_inputs(dir: &TestDir, port: u16, shape: Shape) -> Result<()> {
    use std::fmt::Write;
    std::fs::create_dir_all(dir.host("run"))?;
    std::fs::create_dir_all(dir.host("cache"))?;
    let mut local = String::from("local-data:\n");
    let addresses = |local: &mut String, n: usize| -> std::fmt::Result {
        local.push_str("  addresses:\n");
        for i in 0..n {
            writeln!(local, "    h{i}.scale.test: {}", ip(i))?;
        }
        Ok(())
    };
    let records = |local: &mut String, n: usize| -> std::fmt::Result {
        local.push_str("  records: |\n");
        for i in 0..n {
            writeln!(local, "    r{i}.scale.test. 300 A {}", ip(i))?;
        }
        Ok(())
    };
    match shape {
        Shape::Addresses(n) => addresses(&mut local, n)?,
        Shape::Records(n) => records(&mut local, n)?,
        Shape::Mixed(n) => {
            addresses(&mut local, n)?;
            records(&mut local, n)?;
        }
        Shape::HostsFile(n) => {
            let mut hosts = String::with_capacity(n * 32);
            for i in 0..n {
                writeln!(hosts, "{} f{i}.scale.test", ip(i))?;
            }
            testbed::write(&dir.host("hosts"), &hosts)?;
            writeln!(
                local,
                "  addresses-files:\n    - {}",
                dir.bed("hosts").display()
            )?;
        }
        Shape::Rpz(n) => {
            let mut zone = String::with_capacity(n * 32);
            zone.push_str("$TTL 300\n@ SOA localhost. nobody.invalid. 1 3600 900 86400 300\n@ NS localhost.\n");
            for i in 0..n {
                writeln!(zone, "z{i}.scale.test CNAME .")?;
            }
            testbed::write(&dir.host("rpz.zone"), &zone)?;
            writeln!(
                local,
                "  rpz:\n    - file: {}",
                dir.bed("rpz.zone").display()
            )?;
        }
    }
    // Every shape keeps the records key for the policy-only change.
    if !matches!(shape, Shape::Records(_) | Shape::Mixed(_)) {
        local.push_str("  records: |\n    bench.test. 300 A 192.0.2.7\n");
    }
    let text = format!(
        "workers: 1\nrundir: {run}\nnetwork:\n  listen:\n    - interface: 127.0.0.1@{port}\ncache:\n  storage: {cache}\n  size-max: 100M\nmanagement:\n  unix-socket: {run}/kres-api.sock\nlogging:\n  level: notice\n{local}",
        run = dir.bed("run").display(),
        cache = dir.bed("cache").display(),
    );
    testbed::write(&dir.host("config.yaml"), &text)
}

/// Milliseconds of one whole-process `kresctl validate`.
fn validate(bed: &Bed, flavor: Flavor, dir: &TestDir) -> Result<f64> {
    let t0 = Instant::now();
    let out = match flavor {
        Flavor::Ours => std::process::Command::new(bench::our_binary("kresctl")?)
            .arg("validate")
            .arg(dir.host("config.yaml"))
            .output()?,
        Flavor::Upstream => bed.run_installed(
            "/usr/bin/kresctl",
            &["validate", &dir.bed("config.yaml").to_string_lossy()],
        )?,
    };
    let ms = t0.elapsed().as_secs_f64() * 1000.0;
    ensure!(
        out.status.success(),
        "{} validate failed: {}",
        flavor.label(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(ms)
}

/// One run: cold start, GET /v1/config, a policy-only change; milliseconds of each step that
/// succeeded go to `record(step, ms)` (1, 2, 3), so that a failing change keeps the others,
/// and the control plane's PSS after READY to `record(4, MiB)`.
fn run_once(
    bed: &Bed,
    flavor: Flavor,
    dir: &TestDir,
    port: u16,
    record: &mut dyn FnMut(usize, f64),
) -> Result<()> {
    let t0 = Instant::now();
    let (mut launched, mut notify) = launch(bed, flavor, dir)?;
    // In slices, so that a control plane that gave up is reported at once.
    loop {
        if notify
            .wait_for("READY=1", Duration::from_millis(250))
            .is_ok()
        {
            break;
        }
        let last_lines = || {
            let text = launched.output.text();
            let lines: Vec<&str> = text.lines().rev().take(3).collect();
            lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
        };
        if launched.tree().is_empty() {
            anyhow::bail!("exited before READY: {}", last_lines());
        }
        if t0.elapsed() > START_TIMEOUT {
            anyhow::bail!("no READY within {START_TIMEOUT:?}: {}", last_lines());
        }
    }
    record(1, t0.elapsed().as_secs_f64() * 1000.0);
    record(4, bench::control_plane_pss_kib(&launched) as f64 / 1024.0);
    let api = dir.host("run/kres-api.sock");
    let result = change_steps(&api, port, record);
    launched.signal(nix::sys::signal::Signal::SIGINT)?;
    launched.wait(START_TIMEOUT)?;
    result
}

/// GETs of /v1/config timed in each run: the first, right after READY (while the manager
/// still finishes its start: the stored configuration, the heap given back, the event log's
/// followers), on a row of its own; the rest are the steady state.
const GETS: usize = 20;

/// GET /v1/config, then a policy-only change until DNS answers it.
fn change_steps(api: &Path, port: u16, record: &mut dyn FnMut(usize, f64)) -> Result<()> {
    let mut resp = None;
    for _ in 0..GETS {
        let t0 = Instant::now();
        let got = testbed::http::request(api, "GET", "/v1/config", &[], b"")?;
        ensure!(got.status == 200, "GET /v1/config: {}", got.status);
        let step = if resp.is_none() { 7 } else { 2 };
        record(step, t0.elapsed().as_secs_f64() * 1000.0);
        resp = Some(got);
    }
    let resp = resp.ok_or_else(|| anyhow::anyhow!("no GET /v1/config"))?;

    let server = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let records = String::from_utf8_lossy(&resp.body).into_owned();
    let current: serde_json::Value = serde_json::from_str(&records)?;
    let mut text = current
        .pointer("/local-data/records")
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_owned();
    text.push_str("changed.scale.test. 300 A 192.0.2.99\n");
    let body = serde_json::to_vec(&text)?;
    let t0 = Instant::now();
    let resp = testbed::http::request(
        api,
        "PUT",
        "/v1/config/local-data/records",
        &[("Content-Type", "application/json")],
        &body,
    )?;
    ensure!(resp.status == 200, "PUT: {} {}", resp.status, resp.text());
    let (elapsed, ()) = until(t0, STEP_TIMEOUT, || {
        answers_a(server, "changed.scale.test.", Duration::from_millis(500)).then_some(())
    })?;
    record(3, elapsed.as_secs_f64() * 1000.0);
    Ok(())
}

/// kresd's own time for this configuration, with no manager: the policy-loader Lua (from our
/// `kresctl convert`) run to completion, then one worker from launch to READY; milliseconds
/// of each to `record(5, …)` and `record(6, …)`.
fn kresd_alone(bed: &Bed, dir: &TestDir, record: &mut dyn FnMut(usize, f64)) -> Result<()> {
    for (kind, file) in [
        ("policy-loader", "alone-policy-loader.lua"),
        ("worker", "alone-worker.lua"),
    ] {
        let out = std::process::Command::new(bench::our_binary("kresctl")?)
            .args(["convert", "--type", kind, "-o"])
            .arg(dir.host(file))
            .arg(dir.host("config.yaml"))
            .output()?;
        ensure!(
            out.status.success(),
            "kresctl convert --type {kind}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let loader = dir.bed("alone-policy-loader.lua");
    let t0 = Instant::now();
    // `-c -`: no postconfig defaults, as the manager runs it; stdin is empty.
    let out = bed.run_installed(
        "/usr/sbin/kresd",
        &["-c", &loader.to_string_lossy(), "-c", "-", "-n"],
    )?;
    record(5, t0.elapsed().as_secs_f64() * 1000.0);
    ensure!(
        out.status.success(),
        "policy-loader alone: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut notify = testbed::notify::NotifyListener::bind(&dir.host("alone-notify.sock"))?;
    let worker = dir.bed("alone-worker.lua");
    let args = [testbed::os("-c"), testbed::os(&worker), testbed::os("-n")];
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let env = [
        ("NOTIFY_SOCKET", testbed::os(dir.bed("alone-notify.sock"))),
        ("SYSTEMD_INSTANCE", testbed::os("0")),
    ];
    let env: Vec<(&str, &std::ffi::OsStr)> = env.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
    let t0 = Instant::now();
    let mut launched = bed.launch_installed(Path::new("/usr/sbin/kresd"), &args, &env)?;
    let ready = notify.wait_for("READY=1", START_TIMEOUT);
    let elapsed = t0.elapsed();
    launched.signal(nix::sys::signal::Signal::SIGTERM)?;
    launched.wait(START_TIMEOUT)?;
    ready.map_err(|e| anyhow::anyhow!("worker alone: {e:#}: {}", launched.output.text()))?;
    record(6, elapsed.as_secs_f64() * 1000.0);
    Ok(())
}

/// Our time above kresd's own: the median of the runs' differences (`above`, each run's
/// time less kresd's own in the same run), in milliseconds and as a share of kresd's median
/// time (`floor`).
fn print_above(name: &str, above: &[f64], floor: f64) {
    let o = bench::median(above.to_vec());
    println!(
        "{name:<40} {o:>12.1} {:>12} ms    {:+.1}% of kresd's own {floor:.1} ms (n={})",
        "-",
        o / floor * 100.0,
        above.len()
    );
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let sizes: Vec<usize> = arg("--sizes")
        .unwrap_or_else(|| "1000,10000".into())
        .split(',')
        .map(|s| bench::number(s.trim(), "--sizes"))
        .collect::<Result<_>>()?;
    let runs: usize = arg("--runs").map_or(Ok(3), |r| bench::number(&r, "--runs"))?;
    let mut shapes: Vec<Shape> = Vec::new();
    let mixed_only = args.iter().any(|a| a == "--mixed");
    for &n in &sizes {
        if mixed_only {
            shapes.push(Shape::Mixed(n));
        } else {
            shapes.push(Shape::Addresses(n));
            shapes.push(Shape::Records(n));
        }
    }
    if args.iter().any(|a| a == "--files") {
        shapes.push(Shape::HostsFile(1_000_000));
        shapes.push(Shape::Rpz(1_000_000));
    }
    let bed = Bed::get()?;
    println!("scale benchmark: {runs} runs each, medians; ours against upstream's in the same run");
    print_header();
    for shape in shapes {
        let dir = bed.test_dir("bench-scale")?;
        let port = testbed::free_port()?;
        write_inputs(&dir, port, shape)?;
        let size = std::fs::metadata(dir.host("config.yaml"))?.len();
        let mut samples: [[Vec<f64>; 8]; 2] = Default::default();
        // Ours above kresd alone, run by run: kresd alone runs right after ours, in the same
        // state of the machine (upstream's run leaves it busy writing for a while).
        let (mut ready_above, mut change_above) = (Vec::new(), Vec::new());
        let mut failures: Vec<String> = Vec::new();
        for i in 0..runs {
            let order = if i % 2 == 0 {
                [Flavor::Ours, Flavor::Upstream]
            } else {
                [Flavor::Upstream, Flavor::Ours]
            };
            for flavor in order {
                let k = usize::from(flavor == Flavor::Upstream);
                match validate(bed, flavor, &dir) {
                    Ok(ms) => samples[k][0].push(ms),
                    Err(e) => failures.push(format!("{} validate: {e:#}", flavor.label())),
                }
                let mut this_run: [Option<f64>; 8] = [None; 8];
                let mut record = |step: usize, ms: f64| this_run[step] = Some(ms);
                if let Err(e) = run_once(bed, flavor, &dir, port, &mut record) {
                    failures.push(format!("{} run: {e:#}", flavor.label()));
                }
                if flavor == Flavor::Ours {
                    if let Err(e) = kresd_alone(bed, &dir, &mut record) {
                        failures.push(format!("kresd alone: {e:#}"));
                    }
                    if let [_, Some(ready), _, Some(change), _, Some(loader), Some(worker), _] =
                        this_run
                    {
                        ready_above.push(ready - loader - worker);
                        change_above.push(change - loader);
                    }
                }
                for (step, ms) in this_run.iter().enumerate() {
                    if let Some(ms) = ms {
                        samples[k][step].push(*ms);
                    }
                }
            }
        }
        let label = shape.label();
        println!("-- {label} (config file {} KiB)", size / 1024);
        for (m, (name, unit)) in [
            ("validate", "ms"),
            ("cold start to READY", "ms"),
            ("GET /v1/config", "ms"),
            ("policy-only change", "ms"),
            ("control-plane PSS after READY", "MiB"),
        ]
        .iter()
        .enumerate()
        {
            print_row(name, unit, &samples[0][m], &samples[1][m]);
        }
        print_row(
            "first GET /v1/config after READY",
            "ms",
            &samples[0][7],
            &samples[1][7],
        );
        let loader = bench::median(samples[0][5].clone());
        let worker = bench::median(samples[0][6].clone());
        println!(
            "{:<40} {loader:>12.1} {:>12} ms",
            "kresd alone: policy-loader", "-"
        );
        println!(
            "{:<40} {worker:>12.1} {:>12} ms",
            "kresd alone: worker to READY", "-"
        );
        print_above("READY above kresd alone", &ready_above, loader + worker);
        print_above("change above policy-loader alone", &change_above, loader);
        for failure in &failures {
            let mut line = failure.clone();
            line.truncate(400);
            println!("   FAILED {line}");
        }
    }
    Ok(())
}
