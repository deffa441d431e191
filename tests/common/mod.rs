//! Shared set-up for integration tests: a resolver of ours, running on real kresd in the test
//! bed, with its own rundir, port, API socket and a notify socket standing in for systemd.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use testbed::notify::NotifyListener;
use testbed::{os, Bed, Launched, TestDir};

/// Generous bound for start-up on a loaded 2-core CI machine; never a performance assertion.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
pub const STOP_TIMEOUT: Duration = Duration::from_secs(30);
pub const DNS_TIMEOUT: Duration = Duration::from_secs(5);

pub const DAEMON: &str = env!("CARGO_BIN_EXE_knot-resolver");
pub const KRESCTL: &str = env!("CARGO_BIN_EXE_kresctl");

/// A resolver configuration for a test: fills in rundir, cache, listen port and API socket.
pub struct Setup {
    pub name: &'static str,
    pub workers: u32,
    /// More YAML appended to the generated top-level document.
    pub extra: String,
    /// Extra environment of the daemon.
    pub env: Vec<(&'static str, String)>,
    /// The body of the `logging` section (indented YAML lines).
    pub logging: String,
    /// More lines of the `cache` section (indented YAML lines).
    pub cache: String,
    /// YAML appended inside `network:` right after the plain DNS listen item (more listen
    /// items at 4 spaces, other keys at 2).
    pub network: String,
    /// The body of the `management` section (indented YAML lines); the API socket in the
    /// rundir when `None`.
    pub management: Option<String>,
    /// More arguments of the daemon, after `-c CONFIG`.
    pub args: Vec<String>,
    /// The daemon's binary, when not the one cargo built (a copy an upgrade replaces).
    pub program: Option<PathBuf>,
    /// The limit on open descriptors (soft, hard) the daemon starts with, as a service
    /// manager sets it; the test process's own when `None`.
    pub open_files: Option<(u64, u64)>,
    /// `cache.storage` (a bed path), when not the test directory's own: what a node started
    /// again finds there.
    pub storage: Option<PathBuf>,
}

impl Setup {
    pub fn new(name: &'static str) -> Self {
        Setup {
            name,
            workers: 1,
            extra: String::new(),
            env: Vec::new(),
            logging: "  level: notice\n".into(),
            cache: String::new(),
            network: String::new(),
            management: None,
            args: Vec::new(),
            program: None,
            open_files: None,
            storage: None,
        }
    }
    /// Run the daemon from `path` instead of the binary cargo built.
    pub fn program(mut self, path: &Path) -> Self {
        self.program = Some(path.to_owned());
        self
    }
    /// Start the daemon under this limit on open descriptors (soft, hard).
    pub fn open_files(mut self, soft: u64, hard: u64) -> Self {
        self.open_files = Some((soft, hard));
        self
    }
    /// Add an argument of the daemon.
    pub fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.to_owned());
        self
    }
    /// Replace the body of the `management` section.
    pub fn management(mut self, yaml: &str) -> Self {
        self.management = Some(yaml.to_owned());
        self
    }
    pub fn workers(mut self, n: u32) -> Self {
        self.workers = n;
        self
    }
    pub fn network(mut self, yaml: &str) -> Self {
        self.network.push_str(yaml);
        self
    }
    pub fn env(mut self, key: &'static str, value: &str) -> Self {
        self.env.push((key, value.to_owned()));
        self
    }
    /// Replace the body of the `logging` section.
    pub fn logging(mut self, yaml: &str) -> Self {
        self.logging = yaml.to_owned();
        self
    }
    /// Keep the cache (and what a fleet node keeps beside it) at `storage`, a bed path.
    pub fn storage(mut self, storage: &Path) -> Self {
        self.storage = Some(storage.to_owned());
        self
    }

    /// Add lines to the `cache` section.
    pub fn cache(mut self, yaml: &str) -> Self {
        self.cache.push_str(yaml);
        self
    }
    pub fn extra(mut self, yaml: &str) -> Self {
        self.extra.push_str(yaml);
        self
    }
}

/// A running resolver of ours.
pub struct Resolver {
    pub bed: &'static Bed,
    pub dir: TestDir,
    pub port: u16,
    pub launched: Launched,
    pub notify: NotifyListener,
    /// Host path of the management API socket.
    pub api: PathBuf,
    /// Host path of the config file.
    pub config: PathBuf,
}

pub fn config_yaml(dir: &TestDir, port: u16, s: &Setup) -> String {
    format!(
        "workers: {workers}\nrundir: {run}\nnetwork:\n  listen:\n    - interface: 127.0.0.1@{port}\n{network}cache:\n  storage: {cache}\n  size-max: 10M\n{cache_extra}management:\n{management}logging:\n{logging}{extra}",
        workers = s.workers,
        run = dir.bed("run").display(),
        cache = s.storage.clone().unwrap_or_else(|| dir.bed("cache")).display(),
        extra = s.extra,
        cache_extra = s.cache,
        network = s.network,
        logging = s.logging,
        management = s.management.clone().unwrap_or_else(|| format!(
            "  unix-socket: {}/kres-api.sock\n",
            dir.bed("run").display()
        )),
    )
}

/// Launch without waiting for readiness.
pub fn launch(s: &Setup) -> Result<Resolver> {
    let bed = Bed::get()?;
    let dir = bed.test_dir(s.name)?;
    std::fs::create_dir_all(dir.host("run"))?;
    std::fs::create_dir_all(dir.host("cache"))?;
    let port = testbed::free_port()?;
    let config = dir.host("config.yaml");
    testbed::write(&config, &config_yaml(&dir, port, s))?;
    let notify = NotifyListener::bind(&dir.host("notify.sock"))?;
    let notify_path = os(dir.bed("notify.sock"));
    let mut env: Vec<(&str, &std::ffi::OsStr)> = vec![("NOTIFY_SOCKET", &notify_path)];
    let extra_env: Vec<(&str, std::ffi::OsString)> =
        s.env.iter().map(|(k, v)| (*k, os(v))).collect();
    env.extend(extra_env.iter().map(|(k, v)| (*k, v.as_os_str())));
    let mut args = vec![os("-c"), os(dir.bed("config.yaml"))];
    args.extend(s.args.iter().map(os));
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let program = s.program.clone().unwrap_or_else(|| PathBuf::from(DAEMON));
    let launched = match s.open_files {
        Some(limit) => bed.launch_with_open_files(&program, &args, &env, limit)?,
        None => bed.launch(&program, &args, &env)?,
    };
    let api = dir.host("run/kres-api.sock");
    Ok(Resolver {
        bed,
        dir,
        port,
        launched,
        notify,
        api,
        config,
    })
}

/// Launch and wait for `READY=1`.
pub fn start(s: &Setup) -> Result<Resolver> {
    let mut r = launch(s)?;
    let deadline = std::time::Instant::now() + START_TIMEOUT;
    // Wait in slices so that a daemon that died is reported at once, not after the timeout.
    loop {
        match r.notify.wait_for("READY=1", Duration::from_millis(250)) {
            Ok(_) => return Ok(r),
            Err(e) if std::time::Instant::now() >= deadline || r.launched.tree().is_empty() => {
                anyhow::bail!("{e:#}\ndaemon output:\n{}", r.launched.output.text());
            }
            Err(_) => {}
        }
    }
}

impl Resolver {
    pub fn dns(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Run our kresctl against this resolver.
    pub fn kresctl(&self, args: &[&str]) -> Result<std::process::Output> {
        let out = std::process::Command::new(KRESCTL)
            .arg("-s")
            .arg(&self.api)
            .args(args)
            .output()?;
        Ok(out)
    }

    /// SIGINT, then exit code 0 and no process of the tree left.
    pub fn stop(mut self) {
        use nix::sys::signal::Signal;
        self.launched.signal(Signal::SIGINT).expect("signal");
        let status = self.launched.wait(STOP_TIMEOUT).expect("exit");
        assert_eq!(status.code(), Some(0), "{}", self.launched.output.text());
        assert!(
            self.launched.tree().is_empty(),
            "left: {:?}",
            self.launched.tree()
        );
    }

    /// Raw HTTP request to the management API.
    pub fn http(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> Result<testbed::http::HttpResponse> {
        testbed::http::request(
            &self.api,
            method,
            path,
            &[("Content-Type", "application/json")],
            body,
        )
    }

    /// `PUT /v1/config{pointer}` with `value` as JSON.
    pub fn put_json(&self, pointer: &str, value: serde_json::Value) -> testbed::http::HttpResponse {
        self.http(
            "PUT",
            &format!("/v1/config{pointer}"),
            value.to_string().as_bytes(),
        )
        .expect("PUT")
    }

    /// The A records the resolver answers for `name`, as text.
    pub fn a_records(&self, name: &str) -> Vec<String> {
        testbed::dns::query_udp(self.dns(), name, testbed::dns::TYPE_A, DNS_TIMEOUT)
            .expect("answer")
            .a()
            .iter()
            .map(|a| a.to_string())
            .collect()
    }

    /// Pids of the live processes named `comm`, sorted.
    pub fn pids_named(&self, comm: &str) -> Vec<i32> {
        let mut v: Vec<i32> = self.children_named(comm).iter().map(|p| p.pid).collect();
        v.sort_unstable();
        v
    }

    /// Processes of the tree by executable name, the daemon excluded.
    pub fn children_named(&self, comm: &str) -> Vec<testbed::procs::ProcInfo> {
        self.launched
            .descendants()
            .into_iter()
            .filter(|p| p.comm == comm)
            .collect()
    }
}

/// Upstream's manager (Python + supervisord, from the test bed) running a configuration
/// generated like ours, for comparisons.
pub struct Upstream {
    pub dir: TestDir,
    pub port: u16,
    pub launched: Launched,
    /// Host path of its management API socket.
    pub api: PathBuf,
}

/// Start upstream's `knot-resolver` on `s` and wait for its `READY=1`.
pub fn start_upstream(s: &Setup) -> Result<Upstream> {
    let bed = Bed::get()?;
    let dir = bed.test_dir(s.name)?;
    std::fs::create_dir_all(dir.host("run"))?;
    std::fs::create_dir_all(dir.host("cache"))?;
    let port = testbed::free_port()?;
    testbed::write(&dir.host("config.yaml"), &config_yaml(&dir, port, s))?;
    let mut notify = NotifyListener::bind(&dir.host("notify.sock"))?;
    let launched = bed.launch_installed(
        Path::new("/usr/bin/knot-resolver"),
        &[&os("-c"), &os(dir.bed("config.yaml"))],
        &[("NOTIFY_SOCKET", &os(dir.bed("notify.sock")))],
    )?;
    if let Err(e) = notify.wait_for("READY=1", START_TIMEOUT) {
        anyhow::bail!("{e:#}\nupstream output:\n{}", launched.output.text());
    }
    let api = dir.host("run/kres-api.sock");
    Ok(Upstream {
        dir,
        port,
        launched,
        api,
    })
}

impl Upstream {
    pub fn dns(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

/// A second daemon of ours on the same configuration, rundir and port as a [`Resolver`], with
/// its own notify socket.
pub struct Beside {
    pub launched: Launched,
    pub notify: NotifyListener,
}

/// Launch another daemon on `r`'s configuration, reporting to notify socket `notify`.
pub fn launch_beside(r: &Resolver, notify: &str) -> Result<Beside> {
    let listener = NotifyListener::bind(&r.dir.host(notify))?;
    let notify_path = os(r.dir.bed(notify));
    let launched = r.bed.launch(
        Path::new(DAEMON),
        &[&os("-c"), &os(r.dir.bed("config.yaml"))],
        &[("NOTIFY_SOCKET", &notify_path)],
    )?;
    Ok(Beside {
        launched,
        notify: listener,
    })
}

impl Beside {
    /// SIGINT, then exit code 0 and no process of the tree left.
    pub fn stop(mut self) {
        use nix::sys::signal::Signal;
        self.launched.signal(Signal::SIGINT).expect("signal");
        let status = self.launched.wait(STOP_TIMEOUT).expect("exit");
        assert_eq!(status.code(), Some(0), "{}", self.launched.output.text());
        assert!(self.launched.tree().is_empty());
    }
}

/// Asks one question continuously on its own thread, counting answers and failures, until
/// [`Asker::finish`].
pub struct Asker {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    answered: std::sync::Arc<std::sync::atomic::AtomicU32>,
    failed: std::sync::Arc<std::sync::atomic::AtomicU32>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Asker {
    /// Ask for the A record of `name` at `r`'s DNS port; an empty answer counts as a failure.
    pub fn start(r: &Resolver, name: &'static str) -> Asker {
        use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
        use std::sync::Arc;
        let stop = Arc::new(AtomicBool::new(false));
        let (answered, failed) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let server = r.dns();
        let thread = {
            let (stop, answered, failed) = (stop.clone(), answered.clone(), failed.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match testbed::dns::query_udp(server, name, testbed::dns::TYPE_A, DNS_TIMEOUT) {
                        Ok(resp) if !resp.a().is_empty() => answered.fetch_add(1, Ordering::SeqCst),
                        _ => failed.fetch_add(1, Ordering::SeqCst),
                    };
                }
            })
        };
        Asker {
            stop,
            answered,
            failed,
            thread: Some(thread),
        }
    }

    /// Stop asking; (answered, failed).
    pub fn finish(mut self) -> (u32, u32) {
        use std::sync::atomic::Ordering;
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("asker thread");
        }
        (
            self.answered.load(Ordering::SeqCst),
            self.failed.load(Ordering::SeqCst),
        )
    }
}

impl Resolver {
    /// The ETag of the running configuration.
    pub fn etag(&self) -> String {
        let resp = self.http("GET", "/v1/config", b"").expect("API answers");
        assert_eq!(resp.status, 200, "{}", resp.text());
        resp.header("etag").expect("an ETag").to_owned()
    }
}

/// uid and gid of `name` in the bed's user database.
pub fn bed_user(bed: &Bed, name: &str) -> (u32, u32) {
    let passwd = std::fs::read_to_string(bed.host_path(Path::new("/etc/passwd"))).expect("passwd");
    let line = passwd
        .lines()
        .find(|l| l.starts_with(&format!("{name}:")))
        .expect("user exists in the bed");
    let fields: Vec<&str> = line.split(':').collect();
    (
        fields[2].parse().expect("uid"),
        fields[3].parse().expect("gid"),
    )
}

/// Write `setup`'s configuration into `dir` (for `port`) and start our daemon on it with
/// `--worker-user knot-resolver`; returns once it notified `READY=1`. The rundir and cache
/// must already belong to that user.
pub fn start_with_worker_user(bed: &Bed, dir: &TestDir, port: u16, setup: &Setup) -> Launched {
    testbed::write(&dir.host("config.yaml"), &config_yaml(dir, port, setup)).expect("config");
    let mut notify = NotifyListener::bind(&dir.host("notify.sock")).expect("notify");
    let launched = bed
        .launch(
            Path::new(DAEMON),
            &[
                &os("-c"),
                &os(dir.bed("config.yaml")),
                &os("--worker-user"),
                &os("knot-resolver"),
            ],
            &[("NOTIFY_SOCKET", &os(dir.bed("notify.sock")))],
        )
        .expect("launch");
    if let Err(e) = notify.wait_for("READY=1", START_TIMEOUT) {
        panic!("{e:#}\n{}", launched.output.text());
    }
    launched
}

/// Our container image (`dist/container/Containerfile`) over the podman bed's base, from this
/// test build's binaries laid out as the Containerfile expects (`bin/`, `config.yaml`).
pub fn our_image(podman: &testbed::podman::Podman) -> Result<testbed::podman::Image> {
    our_image_named(podman, "ours")
}

/// [`our_image`] under a name of its own, for a second test of the same process (names are
/// unique per process, and an image is removed with its containers when dropped).
pub fn our_image_named(
    podman: &testbed::podman::Podman,
    name: &str,
) -> Result<testbed::podman::Image> {
    use testbed::podman::{Context, Image};
    let context = Context::new(&format!("image-{name}"))?;
    context.add_binary("bin/knot-resolver", Path::new(DAEMON))?;
    context.add_binary("bin/kresctl", Path::new(KRESCTL))?;
    context.write(
        "config.yaml",
        include_str!("../../dist/container/config.yaml"),
    )?;
    let containerfile = Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/container/Containerfile");
    Image::build(podman, name, &containerfile, &context)
}

/// `kresctl ui` run for a resolver (by the test's user, root); killed when dropped (a failed
/// test too).
pub struct KresctlUi {
    process: std::process::Child,
    /// The page's URL as printed, its secret in the fragment.
    pub url: String,
    /// `http://127.0.0.1:PORT`.
    pub origin: String,
    /// `127.0.0.1:PORT`.
    pub address: String,
    /// This run's secret, from the URL's fragment.
    pub secret: String,
}

impl Drop for KresctlUi {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// `kresctl ui` on a free loopback port for `r`, its address and secret read from the URL it
/// prints.
pub fn serve_ui(r: &Resolver) -> KresctlUi {
    use std::io::BufRead;
    let mut process = std::process::Command::new(KRESCTL)
        .arg("-s")
        .arg(&r.api)
        .args(["ui", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kresctl ui");
    let mut line = String::new();
    std::io::BufReader::new(process.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("kresctl ui prints its URL");
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://127.0.0.1:"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_owned();
    let (origin, secret) = url
        .split_once("/ui#secret=")
        .unwrap_or_else(|| panic!("no secret in {url:?}"));
    let (origin, secret) = (origin.to_owned(), secret.to_owned());
    assert!(
        secret.len() >= 32 && secret.bytes().all(|b| b.is_ascii_hexdigit()),
        "at least 128 bits, in hex: {secret:?}"
    );
    KresctlUi {
        process,
        address: origin.trim_start_matches("http://").to_owned(),
        url,
        origin,
        secret,
    }
}
