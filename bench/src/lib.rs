//! Shared pieces of the benchmarks: running our daemon or upstream's with the same
//! configuration in the test bed, and reporting medians side by side.

pub mod closed_loop;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use testbed::notify::NotifyListener;
use testbed::{os, Bed, Launched, TestDir};

/// Which control plane runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Ours,
    Upstream,
}

impl Flavor {
    pub fn label(self) -> &'static str {
        match self {
            Flavor::Ours => "ours",
            Flavor::Upstream => "upstream",
        }
    }
}

/// The number a command-line argument holds (`what` names the argument in the error).
pub fn number<T>(value: &str, what: &str) -> Result<T>
where
    T: std::str::FromStr,
    T::Err: std::error::Error + Send + Sync + 'static,
{
    value
        .parse()
        .with_context(|| format!("{what}: {value:?} is not a number"))
}

/// The next positional argument's number, or `default` when there is none; a value that does
/// not parse is an error, never the default in disguise.
pub fn positional<T>(args: &mut impl Iterator<Item = String>, what: &str, default: T) -> Result<T>
where
    T: std::str::FromStr,
    T::Err: std::error::Error + Send + Sync + 'static,
{
    args.next()
        .map_or(Ok(default), |value| number(&value, what))
}

/// Our release binaries, next to this benchmark's own executable.
pub fn our_binary(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().context("no directory")?;
    let p = dir.join(name);
    anyhow::ensure!(
        p.exists(),
        "{} not built; run `cargo build --release --bins` first",
        p.display()
    );
    Ok(p)
}

/// A configuration with its own rundir, cache, port and API socket.
pub fn write_config(dir: &TestDir, port: u16, workers: u32, extra: &str) -> Result<()> {
    std::fs::create_dir_all(dir.host("run"))?;
    std::fs::create_dir_all(dir.host("cache"))?;
    let text = format!(
        "workers: {workers}\nrundir: {run}\nnetwork:\n  listen:\n    - interface: 127.0.0.1@{port}\ncache:\n  storage: {cache}\n  size-max: 10M\nmanagement:\n  unix-socket: {run}/kres-api.sock\nlogging:\n  level: notice\nlocal-data:\n  records: |\n    bench.test. 300 A 192.0.2.7\n{extra}",
        run = dir.bed("run").display(),
        cache = dir.bed("cache").display(),
    );
    testbed::write(&dir.host("config.yaml"), &text)
}

/// Launch a control plane on the config in `dir`, with a notify socket of our own.
pub fn launch(bed: &Bed, flavor: Flavor, dir: &TestDir) -> Result<(Launched, NotifyListener)> {
    let notify = NotifyListener::bind(&dir.host("notify.sock"))?;
    let args = [os("-c"), os(dir.bed("config.yaml"))];
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let env = [("NOTIFY_SOCKET", os(dir.bed("notify.sock")))];
    let env: Vec<(&str, &std::ffi::OsStr)> = env.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
    let launched = match flavor {
        Flavor::Ours => bed.launch(&our_binary("knot-resolver")?, &args, &env)?,
        Flavor::Upstream => {
            bed.launch_installed(Path::new("/usr/bin/knot-resolver"), &args, &env)?
        }
    };
    Ok((launched, notify))
}

/// Median of a sample.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One row of a side-by-side table: name, unit, our median, upstream's median.
pub fn print_row(name: &str, unit: &str, ours: &[f64], upstream: &[f64]) {
    let (o, u) = (median(ours.to_vec()), median(upstream.to_vec()));
    let ratio = if o > 0.0 { u / o } else { f64::NAN };
    // Sub-unit figures (a GET in milliseconds) keep their digits.
    let digits = if o < 1.0 { 3 } else { 1 };
    println!(
        "{name:<40} {o:>12.digits$} {u:>12.digits$} {unit:<5} upstream/ours = {ratio:>6.1}x   (n={}, {})",
        ours.len(),
        upstream.len()
    );
}

pub fn print_header() {
    println!(
        "{:<40} {:>12} {:>12}",
        "metric (median)", "ours", "upstream"
    );
}

/// Whether `server` answers `name` with at least one A record within `wait`.
pub fn answers_a(server: std::net::SocketAddr, name: &str, wait: Duration) -> bool {
    testbed::dns::query_udp(server, name, testbed::dns::TYPE_A, wait)
        .is_ok_and(|r| !r.a().is_empty())
}

/// Poll until `f` succeeds or `timeout` passes; returns the elapsed time since `since`.
pub fn until<T>(
    since: Instant,
    timeout: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> Result<(Duration, T)> {
    loop {
        if let Some(v) = f() {
            return Ok((since.elapsed(), v));
        }
        if since.elapsed() > timeout {
            anyhow::bail!("timed out after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Resident memory, in KiB, of the control plane: every process of the tree except kresd and
/// kres-cache-gc, by RSS (pages shared between them, such as one binary's text in two
/// processes, counted in each).
pub fn control_plane_rss_kib(launched: &Launched) -> u64 {
    control_plane(launched, testbed::procs::rss_kib)
}

/// The same by PSS: shared pages counted once in the sum (what the control plane costs).
pub fn control_plane_pss_kib(launched: &Launched) -> u64 {
    control_plane(launched, testbed::procs::pss_kib)
}

/// Copy `/proc/PID/smaps` (and `status`) of every control-plane process into `into`, one file
/// per process named `COMM-PID.smaps`: where the memory goes, mapping by mapping.
pub fn dump_control_plane_smaps(launched: &Launched, into: &Path) -> Result<()> {
    std::fs::create_dir_all(into)?;
    for p in launched.tree() {
        if p.comm == "kresd" || p.comm == "kres-cache-gc" {
            continue;
        }
        for what in ["smaps", "status"] {
            let text = std::fs::read_to_string(format!("/proc/{}/{what}", p.pid))?;
            std::fs::write(into.join(format!("{}-{}.{what}", p.comm, p.pid)), text)?;
        }
    }
    Ok(())
}

fn control_plane(launched: &Launched, measure: fn(i32) -> Option<u64>) -> u64 {
    launched
        .tree()
        .iter()
        .filter(|p| p.comm != "kresd" && p.comm != "kres-cache-gc")
        .filter_map(|p| measure(p.pid))
        .sum()
}

/// Local data beside `bench.test.` (it continues [`write_config`]'s `local-data`): an empty
/// subtree whose names (`fN.fill.test.`) fill the query log's ring with distinct names, as
/// real traffic would.
pub const FILL_RULES: &str = "  rules:\n    - name: [fill.test]\n      subtree: empty\n";

/// Ask `from..to` distinct names under `fill.test.` (a window of [`closed_loop::WINDOW`] in
/// flight; after a wait with no answer the ones in flight are given up).
pub fn fill_names(server: std::net::SocketAddr, from: u64, to: u64) -> Result<()> {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0")?;
    sock.connect(server)?;
    sock.set_read_timeout(Some(Duration::from_millis(500)))?;
    let send = |i: u64| -> Result<()> {
        let name = format!("f{i}.fill.test.");
        let mut q = testbed::dns::encode_query(0, &name, testbed::dns::TYPE_A, false)?;
        q[..2].copy_from_slice(&((i % 65_536) as u16).to_be_bytes());
        sock.send(&q)?;
        Ok(())
    };
    let window = closed_loop::WINDOW as u64;
    let (mut next, mut done) = (from, from);
    let mut buf = [0u8; 512];
    while done < to {
        while next < to && next - done < window {
            send(next)?;
            next += 1;
        }
        match sock.recv(&mut buf) {
            Ok(_) => done += 1,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                done = next;
            }
            Err(e) => return Err(e).context("recv"),
        }
    }
    Ok(())
}

/// `GET /query-log/status` on the API socket `api`.
pub fn query_log_status(api: &Path) -> Result<serde_json::Value> {
    let resp = testbed::http::request(api, "GET", "/query-log/status", &[], b"")?;
    anyhow::ensure!(resp.status == 200, "/query-log/status: {}", resp.text());
    Ok(serde_json::from_slice(&resp.body)?)
}

/// Distinct names asked of `server` from `*next` on until the query log behind `api` holds
/// `target` entries (the workers drop what the reader does not take in time, so more may be
/// asked), each round waiting until every answer is received or counted as missed; the
/// status then.
pub fn fill_query_log(
    server: std::net::SocketAddr,
    api: &Path,
    next: &mut u64,
    target: u64,
) -> Result<serde_json::Value> {
    let held = |s: &serde_json::Value| s["held"].as_u64().unwrap_or(0);
    let seen = |s: &serde_json::Value| {
        s["received"].as_u64().unwrap_or(0) + s["missed"].as_u64().unwrap_or(0)
    };
    let mut status = query_log_status(api)?;
    while held(&status) < target {
        let n = target - held(&status);
        let before = seen(&status);
        fill_names(server, *next, *next + n)?;
        *next += n;
        // Until every answer is either received or counted as missed (within one).
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            status = query_log_status(api)?;
            if seen(&status) + 1 >= before + n {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the answers accounted for: {status}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ok(status)
}
