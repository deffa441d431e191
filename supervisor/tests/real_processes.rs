//! The supervisor against real processes: the `misbehave` helper does, on command, what a
//! service may do wrong (exit, die by signal, ignore SIGTERM, fork and orphan grandchildren,
//! flood its output, send malformed notifications), and each test checks that the supervisor
//! copes. Steps are ordered with FIFOs (the helper reports lines to one and blocks on another)
//! and with the supervisor's own snapshots and logs, never with sleeps.
//!
//! **One supervisor at a time.** A supervisor owns `waitpid(-1)` for the whole process, so two
//! of them in one process would steal each other's children. The tests of this binary share
//! one process (libtest runs them on parallel threads), so every scenario holds
//! [`ONE_SUPERVISOR_AT_A_TIME`] from before its supervisor starts until after every descendant
//! is gone: the scenarios run one after another, and each starts from a process with no
//! children. (Running each scenario in a process of its own would also work; the lock keeps
//! the ordinary `cargo test` harness, filtering and reporting.)
//!
//! **After every scenario** (see [`scenario`]) the supervisor is shut down and the test fails
//! if any descendant of the test process survived (dead or alive: a zombie whose parent is
//! the test process fails it too), if any process the helper reported is still there, or if
//! any helper saw a descriptor other than 0, 1, 2 and those the scenario passed on purpose, or
//! had signals blocked. Leftovers are killed and reaped before the lock is released.

use std::collections::{BTreeSet, VecDeque};
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::sys::stat::Mode;
use nix::sys::wait::waitpid;
use nix::unistd::Pid;
use supervisor::{
    Backoff, ExitStatus, ProcessSnapshot, Readiness, RestartPolicy, ServiceSpec, StartLimit,
    Supervisor, SupervisorError, SupervisorHandle, SupervisorOptions,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::unix::pipe;
use tokio::sync::watch;

const HELPER: &str = env!("CARGO_BIN_EXE_misbehave");

/// Longest wait for any single expected event; the tests never take this long when they pass.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Held by each scenario for its whole life: see the module comment.
static ONE_SUPERVISOR_AT_A_TIME: Mutex<()> = Mutex::new(());

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// ---------------------------------------------------------------------------------------------
// The harness
// ---------------------------------------------------------------------------------------------

/// Log lines of the supervisor, captured so tests can wait for them.
#[derive(Clone)]
struct Logs {
    text: Arc<Mutex<Vec<u8>>>,
    /// Bumped on every write, so waiters wake without polling.
    written: Arc<watch::Sender<u64>>,
}

impl Logs {
    fn new() -> Self {
        Logs {
            text: Arc::new(Mutex::new(Vec::new())),
            written: Arc::new(watch::channel(0).0),
        }
    }

    fn text(&self) -> String {
        let bytes = self.text.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Wait until the captured logs satisfy `pred`.
    async fn wait_for(&self, what: &str, pred: impl Fn(&str) -> bool) {
        let mut rx = self.written.subscribe();
        let wait = async {
            loop {
                rx.borrow_and_update();
                if pred(&self.text()) {
                    return;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        };
        if tokio::time::timeout(TIMEOUT, wait).await.is_err() {
            panic!("timed out waiting for logs: {what}");
        }
    }

    /// Wait for a line containing every one of `parts`.
    async fn wait_for_line(&self, parts: &[&str]) {
        let what = parts.join(" … ");
        self.wait_for(&what, |text| {
            text.lines().any(|l| parts.iter().all(|p| l.contains(p)))
        })
        .await;
    }
}

struct LogWriter(Logs);

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .text
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        self.0.written.send_modify(|n| *n += 1);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = LogWriter;
    fn make_writer(&'a self) -> LogWriter {
        LogWriter(self.clone())
    }
}

/// Everything a scenario works with.
struct Env {
    /// Scratch directory of this scenario: FIFOs, fd listings.
    dir: PathBuf,
    sup: SupervisorHandle,
    logs: Logs,
    /// The FIFO helpers report lines to; we hold it open read-write so that it never ends.
    reports: BufReader<pipe::Receiver>,
    /// Lines read while looking for another.
    backlog: VecDeque<String>,
    /// Our end of the gate helpers block on: a byte releases one waiter, dropping it all.
    gate: Option<std::fs::File>,
    /// Every pid a helper reported (`pid N`, `kid N`): all must be gone at the end.
    tracked: Vec<i32>,
    /// Descriptors passed to children on purpose.
    allowed_fds: BTreeSet<i32>,
}

impl Env {
    fn reports_path(&self) -> PathBuf {
        self.dir.join("reports")
    }

    fn gate_path(&self) -> PathBuf {
        self.dir.join("gate")
    }

    /// The helper's command line: report to us, block on our gate, list its descriptors,
    /// then run `verbs`.
    fn argv(&self, verbs: &[&str]) -> Vec<OsString> {
        let mut argv: Vec<OsString> = vec![
            HELPER.into(),
            "report".into(),
            self.reports_path().into(),
            "gate".into(),
            self.gate_path().into(),
            "list-fds".into(),
            self.dir.join("fds").into(),
        ];
        argv.extend(verbs.iter().map(OsString::from));
        argv
    }

    /// A service running the helper, with policies fast enough for tests: restart at once,
    /// no floor between spawns.
    fn spec(&self, name: &str, verbs: &[&str]) -> ServiceSpec {
        let mut spec = ServiceSpec::new(name, "test", self.argv(verbs));
        spec.backoff =
            Backoff::try_new(ms(10), ms(100), Duration::ZERO, 0, Duration::from_secs(60))
                .expect("valid backoff");
        spec.stop.timeout = Duration::from_secs(10);
        spec
    }

    fn notify_spec(&self, name: &str, verbs: &[&str], timeout: Duration) -> ServiceSpec {
        let mut spec = self.spec(name, verbs);
        spec.readiness = Readiness::Notify { timeout };
        spec
    }

    /// Release one helper blocked on the gate.
    fn release_one(&mut self) {
        let gate = self.gate.as_mut().expect("gate still held");
        gate.write_all(b"g").expect("write gate");
    }

    /// Release every helper blocked on the gate, now and later.
    fn release_all(&mut self) {
        self.gate = None;
    }

    /// The next report line, from the backlog first.
    async fn next_report(&mut self) -> String {
        if let Some(line) = self.backlog.pop_front() {
            return line;
        }
        let mut line = String::new();
        match tokio::time::timeout(TIMEOUT, self.reports.read_line(&mut line)).await {
            Ok(Ok(n)) if n > 0 => {}
            Ok(r) => panic!("reports FIFO ended: {r:?}"),
            Err(_) => panic!("timed out waiting for a report from the helper"),
        }
        let line = line.trim_end().to_owned();
        if let Some(pid) = line
            .strip_prefix("pid ")
            .or_else(|| line.strip_prefix("kid "))
            .and_then(|p| p.parse().ok())
        {
            self.tracked.push(pid);
        }
        line
    }

    /// Wait for a report starting with `prefix`; others stay in the backlog.
    async fn report(&mut self, prefix: &str) -> String {
        let mut skipped = Vec::new();
        let found = loop {
            let line = self.next_report().await;
            if line.starts_with(prefix) {
                break line;
            }
            skipped.push(line);
        };
        self.backlog.extend(skipped);
        found
    }

    /// Wait for the pid a helper reports (`pid N` or `kid N`).
    async fn reported_pid(&mut self, prefix: &str) -> i32 {
        let line = self.report(prefix).await;
        line[prefix.len()..]
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("bad report {line:?}"))
    }

    /// Wait until service `name` satisfies `pred` in a snapshot.
    async fn wait_state(
        &self,
        name: &str,
        what: &str,
        pred: impl Fn(&ProcessSnapshot) -> bool,
    ) -> ProcessSnapshot {
        let mut rx = self.sup.subscribe();
        let wait = async {
            loop {
                let snap = rx.borrow_and_update().clone();
                if let Some(p) = snap.processes.iter().find(|p| p.name == name) {
                    if pred(p) {
                        return p.clone();
                    }
                }
                rx.changed().await.expect("supervisor gone");
            }
        };
        match tokio::time::timeout(TIMEOUT, wait).await {
            Ok(p) => p,
            Err(_) => panic!(
                "timed out waiting for {name} to be {what}; last: {:?}",
                self.process(name)
            ),
        }
    }

    fn process(&self, name: &str) -> Option<ProcessSnapshot> {
        self.sup
            .snapshot()
            .processes
            .iter()
            .find(|p| p.name == name)
            .cloned()
    }

    /// Check the descriptor listings every helper wrote: 0, 1, 2 and the allowed ones only,
    /// and no blocked signals.
    fn check_fd_listings(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let Ok(entries) = std::fs::read_dir(self.dir.join("fds")) else {
            return problems;
        };
        let allowed: BTreeSet<i32> = [0, 1, 2]
            .into_iter()
            .chain(self.allowed_fds.iter().copied())
            .collect();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".tmp") {
                continue;
            }
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let mut fds = BTreeSet::new();
            for line in text.lines() {
                if let Some(mask) = line.strip_prefix("SigBlk:") {
                    if !mask.trim().trim_start_matches('0').is_empty() {
                        problems.push(format!("helper {name} started with blocked signals {mask}"));
                    }
                } else if let Some(fd) = line.split(' ').next().and_then(|f| f.parse().ok()) {
                    fds.insert(fd);
                }
            }
            let stdio = BTreeSet::from([0, 1, 2]);
            if !fds.is_subset(&allowed) || !stdio.is_subset(&fds) {
                problems.push(format!(
                    "helper {name} has descriptors {fds:?}; 0, 1, 2 and at most {allowed:?} \
                     expected:\n{text}"
                ));
            }
        }
        problems
    }
}

/// Make a FIFO.
fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, Mode::from_bits_truncate(0o600)).expect("mkfifo");
}

/// Run one scenario with its own supervisor, logs and scratch directory, then check and clean
/// up as the module comment says. `filter` selects the captured logs (`child=off` for floods).
/// The logs are printed when the scenario fails, or always with `SHOW_LOGS=1`.
fn scenario(filter: &str, body: impl AsyncFnOnce(&mut Env)) {
    let _serial: MutexGuard<()> = ONE_SUPERVISOR_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "supervisor-real-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("fds")).expect("scratch dir");
    mkfifo(&dir.join("reports"));
    mkfifo(&dir.join("gate"));

    let logs = Logs::new();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(logs.clone())
        .with_ansi(false)
        .without_time()
        .finish();
    let _log_guard = tracing::subscriber::set_default(subscriber);
    // As the daemon does at start-up.
    supervisor::os::cloexec_inherited_fds(&[]).expect("cloexec inherited fds");

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(async {
            let (sup, actor) = Supervisor::start(SupervisorOptions {
                notify_socket: dir.join("notify.sock"),
                notify_senders: None,
                line_levels: supervisor::output::levels_by_stream,
            })
            .expect("start supervisor");
            let reports = pipe::OpenOptions::new()
                .read_write(true)
                .open_receiver(dir.join("reports"))
                .expect("open reports FIFO");
            let gate = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(dir.join("gate"))
                .expect("open gate FIFO");
            let mut env = Env {
                dir: dir.clone(),
                sup,
                logs: logs.clone(),
                reports: BufReader::new(reports),
                backlog: VecDeque::new(),
                gate: Some(gate),
                tracked: Vec::new(),
                allowed_fds: BTreeSet::new(),
            };
            body(&mut env).await;
            // Scenarios about shutdown have ended the actor already.
            match tokio::time::timeout(TIMEOUT, env.sup.shutdown()).await {
                Ok(Ok(_)) | Ok(Err(SupervisorError::Gone)) => {}
                Ok(Err(e)) => panic!("shutdown: {e}"),
                Err(_) => panic!("shutdown timed out"),
            }
            tokio::time::timeout(TIMEOUT, actor)
                .await
                .expect("actor did not end")
                .expect("actor panicked");
            (env.tracked.clone(), env.check_fd_listings())
        })
    }));
    drop(runtime);

    // What is left must be found before it is cleaned up.
    let leftovers = descendants();
    let mut problems: Vec<String> = leftovers
        .iter()
        .map(|p| format!("surviving descendant {p:?}"))
        .collect();
    if let Ok((tracked, fd_problems)) = &outcome {
        for &pid in tracked {
            if let Some(p) = proc_stat(pid) {
                problems.push(format!("helper process {pid} still exists: {p:?}"));
            }
        }
        problems.extend(fd_problems.iter().cloned());
    }
    kill_and_reap_descendants();
    let _ = std::fs::remove_dir_all(&dir);
    if outcome.is_err() || !problems.is_empty() || std::env::var_os("SHOW_LOGS").is_some() {
        eprintln!("---- supervisor logs ----\n{}", logs.text());
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    assert!(problems.is_empty(), "after the scenario: {problems:#?}");
}

/// `(pid, state, ppid)` of a process, from /proc.
#[derive(Debug, Clone, Copy)]
struct ProcStat {
    pid: i32,
    state: char,
    ppid: i32,
}

fn proc_stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain anything; fields follow the last ')'.
    let rest = &text[text.rfind(')')? + 2..];
    let mut fields = rest.split(' ');
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some(ProcStat { pid, state, ppid })
}

/// Every process whose chain of parents leads to us, zombies included.
fn descendants() -> Vec<ProcStat> {
    let me = std::process::id() as i32;
    let all: Vec<ProcStat> = std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .filter_map(proc_stat)
                .collect()
        })
        .unwrap_or_default();
    let parent_of = |pid: i32| all.iter().find(|p| p.pid == pid).map(|p| p.ppid);
    all.iter()
        .filter(|p| {
            let mut cur = p.ppid;
            for _ in 0..64 {
                if cur == me {
                    return true;
                }
                match parent_of(cur) {
                    Some(next) if cur > 1 => cur = next,
                    _ => return false,
                }
            }
            false
        })
        .copied()
        .collect()
}

/// SIGKILL every descendant and reap them all (they end up as our children: we are a
/// subreaper). Runs with no supervisor alive, so this is the only `waitpid` of the process.
fn kill_and_reap_descendants() {
    for _ in 0..3 {
        let left = descendants();
        if left.is_empty() {
            return;
        }
        for p in &left {
            let _ = kill(Pid::from_raw(p.pid), Signal::SIGKILL);
        }
        while waitpid(None::<Pid>, None).is_ok() {}
    }
}

fn code(c: i32) -> Option<ExitStatus> {
    Some(ExitStatus::Code(c))
}

fn signaled(signal: Signal) -> Option<ExitStatus> {
    Some(ExitStatus::Signaled {
        signal: signal as i32,
        core_dumped: false,
    })
}

// ---------------------------------------------------------------------------------------------
// Restarts
// ---------------------------------------------------------------------------------------------

#[test]
fn a_process_that_exits_is_restarted_and_its_exit_code_kept() {
    scenario("debug,child=info", async |env| {
        let spec = env.spec("svc", &["wait", "exit", "3"]);
        env.sup.add(spec, Vec::new()).await.expect("add");
        let first = env.sup.start("svc").await.expect("start");
        assert_eq!(env.reported_pid("pid ").await, first.as_raw());
        env.release_one();
        let second = env.reported_pid("pid ").await;
        assert_ne!(second, first.as_raw());
        let p = env
            .wait_state("svc", "running again", |p| p.pid == Some(second))
            .await;
        assert_eq!(p.state, "running");
        assert_eq!(p.restarts, 1);
        assert_eq!(p.last_exit, code(3));
    });
}

#[test]
fn a_process_killed_by_a_signal_is_restarted_and_the_signal_kept() {
    scenario("debug,child=info", async |env| {
        let spec = env.spec("svc", &["wait", "die", "USR1"]);
        env.sup.add(spec, Vec::new()).await.expect("add");
        let first = env.sup.start("svc").await.expect("start");
        assert_eq!(env.reported_pid("pid ").await, first.as_raw());
        env.release_one();
        let second = env.reported_pid("pid ").await;
        let p = env
            .wait_state("svc", "running again", |p| p.pid == Some(second))
            .await;
        assert_eq!(p.restarts, 1);
        assert_eq!(p.last_exit, signaled(Signal::SIGUSR1));
        env.logs
            .wait_for_line(&["process exited", "killed by SIGUSR1"])
            .await;
    });
}

#[test]
fn the_start_limit_fails_a_crash_loop_and_an_explicit_start_clears_it() {
    scenario("debug,child=info", async |env| {
        let mut spec = env.spec("svc", &["wait", "exit", "1"]);
        spec.start_limit = StartLimit {
            burst: 2,
            interval: Duration::from_secs(600),
        };
        env.sup.add(spec, Vec::new()).await.expect("add");
        env.sup.start("svc").await.expect("start");
        // Three crashes: two automatic restarts are allowed, the third crash fails it.
        for _ in 0..3 {
            env.reported_pid("pid ").await;
            env.release_one();
        }
        let p = env
            .wait_state("svc", "failed", |p| p.state == "failed")
            .await;
        assert_eq!(p.failure.as_deref(), Some("start limit hit"));
        assert_eq!(p.restarts, 2);
        assert_eq!(p.last_exit, code(1));
        assert_eq!(p.pid, None);

        // An explicit start is allowed again, with a clean slate.
        let pid = env.sup.start("svc").await.expect("explicit start");
        assert_eq!(env.reported_pid("pid ").await, pid.as_raw());
        let p = env.process("svc").expect("svc");
        assert_eq!(p.state, "running");
        // The fresh start has its whole burst again: one crash is restarted.
        env.release_one();
        let again = env.reported_pid("pid ").await;
        env.wait_state("svc", "restarted", |p| p.pid == Some(again))
            .await;
        assert_eq!(
            env.sup.stop("svc").await.expect("stop"),
            signaled(Signal::SIGTERM)
        );
    });
}

#[test]
fn a_program_that_cannot_be_spawned_hits_the_start_limit() {
    scenario("debug,child=info", async |env| {
        let mut spec = env.spec("svc", &[]);
        spec.argv = vec!["/nonexistent/program".into()];
        spec.start_limit = StartLimit {
            burst: 2,
            interval: Duration::from_secs(600),
        };
        env.sup.add(spec, Vec::new()).await.expect("add");
        match env.sup.start("svc").await {
            Err(SupervisorError::StartFailed { reason, .. }) => assert!(
                matches!(reason, supervisor::machine::FailReason::SpawnFailed { .. }),
                "{reason:?}"
            ),
            other => panic!("expected a spawn failure, got {other:?}"),
        }
        // Failed spawns are start attempts too: two retries, then the service fails instead
        // of retrying forever.
        let p = env
            .wait_state("svc", "failed", |p| p.state == "failed")
            .await;
        assert_eq!(p.failure.as_deref(), Some("start limit hit"));
        assert_eq!(p.restarts, 2);
    });
}

#[test]
fn restart_and_remove_commands() {
    scenario("debug,child=info", async |env| {
        let spec = env.notify_spec("svc", &["notify", "READY=1", "wait"], TIMEOUT);
        env.sup.add(spec, Vec::new()).await.expect("add");
        let first = env.sup.start("svc").await.expect("start");
        let second = env.sup.restart("svc").await.expect("restart");
        assert_ne!(first, second);
        let p = env.process("svc").expect("svc");
        assert_eq!(
            (p.state.as_str(), p.pid),
            ("running", Some(second.as_raw()))
        );
        assert_eq!(p.last_exit, signaled(Signal::SIGTERM));
        assert_eq!(
            env.sup.remove("svc").await.expect("remove"),
            signaled(Signal::SIGTERM)
        );
        assert!(env.process("svc").is_none());
        assert_eq!(
            env.sup.start("svc").await,
            Err(SupervisorError::UnknownService("svc".into()))
        );
    });
}

#[test]
fn a_process_killed_on_request_is_restarted_with_the_reason_kept() {
    scenario("debug,child=info", async |env| {
        // A process that answers nothing and ignores SIGTERM: only SIGKILL ends it.
        let spec = env.spec("svc", &["ignore-term", "wait"]);
        env.sup.add(spec, Vec::new()).await.expect("add");
        let first = env.sup.start("svc").await.expect("start");
        assert_eq!(env.reported_pid("pid ").await, first.as_raw());
        env.sup.kill("svc", "hung: no answer").await.expect("kill");
        let second = env.reported_pid("pid ").await;
        assert_ne!(second, first.as_raw());
        let p = env
            .wait_state("svc", "running again", |p| p.pid == Some(second))
            .await;
        assert_eq!(p.last_exit, signaled(Signal::SIGKILL));
        assert_eq!(p.restarts, 1);
        let snapshot = env.sup.snapshot();
        let svc = snapshot
            .processes
            .iter()
            .find(|p| p.name == "svc")
            .expect("svc");
        assert_eq!(svc.kill_reason.as_deref(), Some("hung: no answer"));
        // The reason names the process it was about, not the one running now.
        assert_eq!(svc.killed_pid, Some(first.as_raw()));
        assert_eq!(
            env.sup.kill("nothing", "x").await,
            Err(SupervisorError::UnknownService("nothing".into()))
        );
    });
}

#[test]
fn a_handed_over_table_is_adopted_without_restarting_anything() {
    scenario("debug,child=info", async |env| {
        // A service handed a descriptor at a number of its own, and a plain one.
        let (handed, _writer) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
        let at = 40;
        env.allowed_fds.insert(at);
        let spec = env.notify_spec("a", &["notify", "READY=1", "wait"], TIMEOUT);
        env.sup
            .add_handing(spec, vec![(handed, at)])
            .await
            .expect("add a");
        let a = env.sup.start("a").await.expect("start a");
        env.sup
            .add(env.spec("b", &["wait"]), Vec::new())
            .await
            .expect("add b");
        let b = env.sup.start("b").await.expect("start b");
        env.reported_pid("pid ").await;
        env.reported_pid("pid ").await;

        // Not while a process is starting: nobody else could tell its caller it is ready.
        let spec = env.notify_spec("c", &["wait"], TIMEOUT);
        env.sup.add(spec, Vec::new()).await.expect("add c");
        let sup = env.sup.clone();
        let starting = tokio::spawn(async move { sup.start("c").await });
        env.wait_state("c", "starting", |p| p.state == "starting")
            .await;
        env.reported_pid("pid ").await;
        assert!(matches!(
            env.sup.hand_over().await,
            Err(SupervisorError::Busy(_))
        ));
        env.sup.remove("c").await.expect("remove c");
        assert!(starting.await.expect("join").is_err());

        let handover = env.sup.hand_over().await.expect("hand over");
        assert!(
            matches!(env.sup.start("a").await, Err(SupervisorError::Gone)),
            "the actor ended with the handover"
        );
        // As across execve: the image as text, the descriptors left open by number.
        let text = serde_json::to_string(&handover.image()).expect("image");
        let image = handover.release();
        assert_eq!(serde_json::to_string(&image).expect("image"), text);
        // A death while nobody watches.
        kill(b, Signal::SIGKILL).expect("kill b");
        let claimed =
            supervisor::handover::Handover::claim(serde_json::from_str(&text).expect("parse"))
                .expect("claim");
        let (sup, actor) =
            Supervisor::adopt(claimed, supervisor::output::levels_by_stream).expect("adopt");
        env.sup = sup;

        let p = env.process("a").expect("a adopted");
        assert_eq!((p.state.as_str(), p.pid), ("running", Some(a.as_raw())));
        let p = env
            .wait_state("b", "restarted", |p| {
                p.pid.is_some() && p.pid != Some(b.as_raw())
            })
            .await;
        assert_eq!((p.last_exit, p.restarts), (signaled(Signal::SIGKILL), 1));
        env.reported_pid("pid ").await;
        // What was handed still reaches a's next process at its number.
        let again = env.sup.restart("a").await.expect("restart a");
        env.reported_pid("pid ").await;
        let listing =
            std::fs::read_to_string(env.dir.join("fds").join(again.to_string())).expect("listing");
        assert!(
            listing.lines().any(|l| l.starts_with(&format!("{at} "))),
            "descriptor {at} handed after the adoption: {listing}"
        );
        // The adopted actor is this scenario's: it stops its children and ends here.
        env.sup.shutdown().await.expect("shutdown");
        tokio::time::timeout(TIMEOUT, actor)
            .await
            .expect("the adopted actor ends")
            .expect("the adopted actor did not panic");
    });
}

#[test]
fn a_drain_is_announced_in_the_snapshot_while_everything_keeps_running() {
    scenario("debug,child=info", async |env| {
        let spec = env.notify_spec("svc", &["notify", "READY=1", "wait"], TIMEOUT);
        env.sup.add(spec, Vec::new()).await.expect("add");
        let pid = env.sup.start("svc").await.expect("start");
        assert!(!env.sup.snapshot().draining);
        env.sup.drain().await.expect("drain");
        let snapshot = env.sup.snapshot();
        assert!(snapshot.draining && !snapshot.shutting_down);
        let p = env.process("svc").expect("svc");
        assert_eq!((p.state.as_str(), p.pid), ("running", Some(pid.as_raw())));
    });
}

// ---------------------------------------------------------------------------------------------
// Readiness
// ---------------------------------------------------------------------------------------------

#[test]
fn ready_sent_late_is_awaited() {
    scenario("debug,child=info", async |env| {
        let verbs = [
            "notify",
            "STATUS=warming up",
            "wait",
            "notify",
            "READY=1",
            "wait",
        ];
        let spec = env.notify_spec("svc", &verbs, TIMEOUT);
        env.sup.add(spec, Vec::new()).await.expect("add");
        let sup = env.sup.clone();
        let start = tokio::spawn(async move { sup.start("svc").await });
        let pid = env.reported_pid("pid ").await;
        let p = env
            .wait_state("svc", "warming up", |p| {
                p.status_text.as_deref() == Some("warming up")
            })
            .await;
        assert_eq!((p.state.as_str(), p.ready_at), ("starting", None));
        env.release_one();
        let ready = start.await.expect("join").expect("start");
        assert_eq!(ready.as_raw(), pid);
        let p = env.process("svc").expect("svc");
        assert_eq!(p.state, "running");
        assert!(p.ready_at.is_some());
    });
}

#[test]
fn ready_never_sent_times_out_kills_and_applies_the_restart_policy() {
    scenario("debug,child=info", async |env| {
        let mut spec = env.notify_spec("svc", &["notify", "STATUS=stuck", "wait"], ms(300));
        spec.start_limit = StartLimit {
            burst: 1,
            interval: Duration::from_secs(600),
        };
        env.sup.add(spec, Vec::new()).await.expect("add");
        match env.sup.start("svc").await {
            Err(SupervisorError::StartFailed { reason, .. }) => {
                assert_eq!(reason, supervisor::machine::FailReason::ReadinessTimeout)
            }
            other => panic!("expected a readiness timeout, got {other:?}"),
        }
        // Restarted once (the policy), timed out again, then failed by the start limit.
        let p = env
            .wait_state("svc", "failed", |p| p.state == "failed")
            .await;
        assert_eq!(p.restarts, 1);
        assert_eq!(p.last_exit, signaled(Signal::SIGKILL));
        assert_eq!(p.failure.as_deref(), Some("start limit hit"));
        assert_eq!(p.status_text.as_deref(), Some("stuck"));
        env.reported_pid("pid ").await;
        env.reported_pid("pid ").await;
    });
}

#[test]
fn ready_sent_twice_is_harmless() {
    scenario("debug,child=info", async |env| {
        let verbs = [
            "notify",
            "READY=1",
            "notify",
            "READY=1",
            "notify",
            "STATUS=after the second",
            "wait",
        ];
        let spec = env.notify_spec("svc", &verbs, TIMEOUT);
        env.sup.add(spec, Vec::new()).await.expect("add");
        let pid = env.sup.start("svc").await.expect("start");
        let first = env.process("svc").expect("svc");
        // STATUS= comes after the second READY=1 on the same socket: once it is seen, the
        // second READY=1 was handled.
        let p = env
            .wait_state("svc", "past the second READY", |p| {
                p.status_text.as_deref() == Some("after the second")
            })
            .await;
        assert_eq!((p.state.as_str(), p.pid), ("running", Some(pid.as_raw())));
        assert_eq!(p.ready_at, first.ready_at);
        assert_eq!(p.restarts, 0);
    });
}

#[test]
fn ready_sent_right_before_exiting_is_attributed() {
    scenario("debug,child=info", async |env| {
        let mut spec = env.notify_spec("job", &["notify", "READY=1", "exit", "0"], TIMEOUT);
        spec.restart = RestartPolicy::Never;
        env.sup.add(spec, Vec::new()).await.expect("add");
        // READY=1 is drained before the exit is reaped, so start succeeds even though the
        // process may be gone by the time the supervisor looks.
        let pid = env.sup.start("job").await.expect("start");
        assert_eq!(env.reported_pid("pid ").await, pid.as_raw());
        let p = env
            .wait_state("job", "exited", |p| p.state == "exited")
            .await;
        assert_eq!(p.last_exit, code(0));
    });
}

#[test]
fn ready_from_a_grandchild_is_ignored() {
    scenario("debug,child=info", async |env| {
        let verbs = [
            "notify-from-kid",
            "READY=1",
            "notify",
            "STATUS=kid has sent",
            "wait",
        ];
        let spec = env.notify_spec("svc", &verbs, TIMEOUT);
        env.sup.add(spec, Vec::new()).await.expect("add");
        let sup = env.sup.clone();
        let start = tokio::spawn(async move { sup.start("svc").await });
        let kid: i32 = env
            .report("notified-from ")
            .await
            .trim_start_matches("notified-from ")
            .parse()
            .expect("kid pid");
        // Our child sends STATUS= only after its grandchild sent READY=1 and exited.
        let p = env
            .wait_state("svc", "past the grandchild's READY", |p| {
                p.status_text.as_deref() == Some("kid has sent")
            })
            .await;
        assert_eq!(
            p.state, "starting",
            "READY=1 from pid {kid} was not ignored"
        );
        assert_eq!(p.ready_at, None);
        assert!(!start.is_finished());
        assert_eq!(
            env.sup.stop("svc").await.expect("stop"),
            signaled(Signal::SIGTERM)
        );
        assert!(matches!(
            start.await.expect("join"),
            Err(SupervisorError::StoppedWhileStarting { .. })
        ));
    });
}

#[test]
fn a_child_flooding_the_notify_socket_cannot_starve_the_supervisor() {
    scenario("info,child=info", async |env| {
        let verbs = ["notify", "READY=1", "notify-flood", "STATUS=spam"];
        let spammers = ["spam", "spam2", "spam3"];
        for name in spammers {
            let spec = env.notify_spec(name, &verbs, TIMEOUT);
            env.sup.add(spec, Vec::new()).await.expect("add");
            env.sup.start(name).await.expect("start");
            env.wait_state(name, "spamming", |p| {
                p.status_text.as_deref() == Some("spam")
            })
            .await;
        }
        // While the flood goes on, commands are served and other children are reaped.
        let mut job = env.spec("job", &["exit", "0"]);
        job.restart = RestartPolicy::Never;
        let ran = tokio::time::timeout(TIMEOUT, env.sup.run(job)).await;
        assert_eq!(ran, Ok(Ok(ExitStatus::Code(0))), "starved by the flood");
        for name in spammers {
            let stopped = tokio::time::timeout(TIMEOUT, env.sup.stop(name)).await;
            assert_eq!(stopped, Ok(Ok(signaled(Signal::SIGTERM))), "{name}");
        }
        for _ in 0..4 {
            env.reported_pid("pid ").await;
        }
    });
}

/// The numbers a summary of notify socket noise counts as `what`, in every such line of `text`.
fn noise_counted(text: &str, what: &str) -> u64 {
    text.lines()
        .filter(|l| l.contains("notify socket noise"))
        .filter_map(|l| {
            let before = &l[..l.find(what)?];
            before
                .trim_end()
                .rsplit([' ', ','])
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[test]
fn a_notify_flood_from_many_processes_costs_a_bounded_log_and_starves_nothing() {
    const FLOODERS: usize = 4;
    /// Datagrams the flood must have sent (and we counted) before it is measured.
    const AT_LEAST: u64 = 50_000;
    /// Summaries to wait for: the flood lasts at least this many seconds of the summaries' own
    /// period.
    const SUMMARIES: usize = 3;
    const UNKNOWN: &str = "datagrams from processes that are not services";
    scenario("info,child=off", async |env| {
        // Grandchildren of a service flood the socket: processes that are no service.
        let flooders = FLOODERS.to_string();
        let verbs = [
            "kids",
            &flooders,
            "group+notify-flood",
            "notify",
            "READY=1",
            "wait",
        ];
        let spec = env.notify_spec("flooder", &verbs, TIMEOUT);
        env.sup.add(spec, Vec::new()).await.expect("add");
        env.sup.start("flooder").await.expect("start");
        for _ in 0..FLOODERS {
            env.reported_pid("kid ").await;
        }
        env.logs
            .wait_for_line(&["notify socket noise", UNKNOWN])
            .await;
        let from = env.logs.text().len();
        let started = std::time::Instant::now();

        // While the flood goes on, a child's exit is reaped and the child restarted …
        let spec = env.notify_spec("crasher", &["notify", "READY=1", "wait"], TIMEOUT);
        env.sup.add(spec, Vec::new()).await.expect("add");
        let first = tokio::time::timeout(TIMEOUT, env.sup.start("crasher"))
            .await
            .expect("started under the flood")
            .expect("start");
        kill(first, Signal::SIGKILL).expect("kill the crasher");
        let again = env
            .wait_state("crasher", "restarted", |p| {
                p.restarts >= 1 && p.state == "running" && p.pid != Some(first.as_raw())
            })
            .await;
        assert_eq!(again.last_exit, signaled(Signal::SIGKILL));
        // … and commands are answered.
        let mut job = env.spec("job", &["exit", "0"]);
        job.restart = RestartPolicy::Never;
        let ran = tokio::time::timeout(TIMEOUT, env.sup.run(job)).await;
        assert_eq!(ran, Ok(Ok(ExitStatus::Code(0))), "starved by the flood");
        let responsive = started.elapsed();

        // The flood goes on until it has been counted at length.
        env.logs
            .wait_for("the flood counted at length", |text| {
                let window = &text[from..];
                noise_counted(window, UNKNOWN) >= AT_LEAST
                    && window
                        .lines()
                        .filter(|l| l.contains("notify socket noise"))
                        .count()
                        >= SUMMARIES
            })
            .await;
        let text = env.logs.text();
        let elapsed = started.elapsed();
        let window = &text[from..];
        let bytes = window.len();
        let noise_lines: Vec<&str> = window
            .lines()
            .filter(|l| l.contains("notify socket noise"))
            .collect();
        let noise_bytes: usize = noise_lines.iter().map(|l| l.len() + 1).sum();
        let datagrams = noise_counted(window, UNKNOWN);
        let secs = elapsed.as_secs_f64();
        eprintln!(
            "notify flood from {FLOODERS} processes: {datagrams} datagrams in {secs:.1} s \
             ({:.0}/s); log grew by {bytes} bytes, {noise_bytes} of them in {} noise lines \
             ({:.0} bytes/s; 12 s: about {:.0} bytes); reaped, restarted and answered a \
             command within {:.2} s of the flood being measured",
            datagrams as f64 / secs,
            noise_lines.len(),
            noise_bytes as f64 / secs,
            noise_bytes as f64 / secs * 12.0,
            responsive.as_secs_f64(),
        );
        // One noise line a period at most, whatever the number of datagrams.
        let periods = elapsed.as_secs() + 2;
        assert!(
            noise_lines.len() as u64 <= periods,
            "{} noise lines in {secs:.1} s:\n{}",
            noise_lines.len(),
            noise_lines.join("\n")
        );
        // Each line is short; the rest of the log is the crasher's and the job's few lines.
        assert!(noise_lines.iter().all(|l| l.len() < 512), "{noise_lines:?}");
        assert!(
            bytes < noise_bytes + 16 * 1024,
            "{bytes} bytes of log:\n{window}"
        );
    });
}

/// The directing child's side of a link whose other end is `theirs`, once welcomed.
async fn welcomed(theirs: std::os::fd::OwnedFd) -> supervisor::remote::Parent {
    let link = supervisor::remote::Link::from_fd(theirs).expect("link");
    supervisor::remote::Parent::connect(link)
        .await
        .expect("welcome")
}

/// How these tests serve a directing child: its calls on `sup` within `policy`, its
/// notifications to `upward`, its re-execution requests to `reexec`; hung after [`TIMEOUT`]
/// without an answer to pings; none of its descriptors kept upward.
fn child_service<'a>(
    sup: &'a supervisor::SupervisorHandle,
    policy: &'a supervisor::remote::ChildPolicy,
    upward: &'a supervisor::upward::UpwardNotifier,
    reexec: Option<&'a tokio::sync::mpsc::UnboundedSender<supervisor::remote::ReexecRequest>>,
) -> supervisor::remote::ChildService<'a> {
    supervisor::remote::ChildService {
        sup,
        policy,
        upward,
        hang_after: TIMEOUT,
        reexec,
        keep_upward: |_| false,
    }
}

#[test]
fn a_table_of_256_services_with_hostile_statuses_reaches_the_directing_child() {
    use supervisor::remote::{
        table_messages, ChildEnd, ChildPolicy, FdStore, Link, MAX_STATUS, TABLE_PART,
    };
    use supervisor::upward::UpwardNotifier;
    const SERVICES: usize = 256;
    scenario("info,child=off", async |env| {
        let mut store = FdStore::default();
        let policy = ChildPolicy::programs(vec![PathBuf::from(HELPER)]);
        let upward = UpwardNotifier::disabled();
        let sup = env.sup.clone();
        let service = child_service(&sup, &policy, &upward, None);
        // A whole datagram: 4,080 control bytes of status, then READY=1 (the helper's `notify`
        // turns the two characters `\n` into a newline).
        let hostile: String = (1u8..0x20)
            .filter(|&b| b != b'\n')
            .chain([0x7f])
            .map(char::from)
            .cycle()
            .take(4080)
            .collect();
        let text = format!("STATUS={hostile}\\nREADY=1");
        let name = |i: usize| format!("svc{i:03}");
        let (ours, theirs) = Link::pair().expect("link");
        let stop = tokio_util::sync::CancellationToken::new();
        let child = async {
            let parent = welcomed(theirs).await;
            let calls = (0..SERVICES).map(|i| {
                let spec = env.notify_spec(&name(i), &["notify", &text, "wait"], TIMEOUT);
                let handle = parent.handle.clone();
                async move {
                    handle.add(spec, Vec::new()).await?;
                    handle.start(&name(i)).await
                }
            });
            let started = tokio::time::timeout(TIMEOUT * 4, futures_util::future::join_all(calls))
                .await
                .expect("every service started through the link");
            for (i, pid) in started.into_iter().enumerate() {
                pid.unwrap_or_else(|e| panic!("{}: {e}", name(i)));
            }
            // The directing child sees the whole table, every status one bounded line.
            let mut table = parent.handle.subscribe();
            let seen = tokio::time::timeout(
                TIMEOUT,
                table.wait_for(|t| {
                    t.processes.len() == SERVICES
                        && t.processes
                            .iter()
                            .all(|p| p.state == "running" && p.status_text.is_some())
                }),
            )
            .await
            .expect("the whole table reached the directing child")
            .expect("the link stays up")
            .clone();
            for p in &seen.processes {
                let status = p.status_text.as_deref().unwrap_or_default();
                assert!(status.len() <= MAX_STATUS, "{} bytes", status.len());
                assert!(!status.chars().any(char::is_control), "{status:?}");
            }
            // And the table the supervisor has now (times travel as float seconds).
            let key = |t: &supervisor::Snapshot| -> Vec<(String, Option<i32>, String)> {
                t.processes
                    .iter()
                    .map(|p| (p.name.clone(), p.pid, p.state.to_string()))
                    .collect()
            };
            let root = key(&env.sup.snapshot());
            tokio::time::timeout(TIMEOUT, table.wait_for(|t| key(t) == root))
                .await
                .expect("the latest table reached the directing child")
                .expect("the link stays up");
            parent.largest_message()
        };
        let serving = supervisor::remote::serve_child(ours, 1, &service, &mut store, stop.clone());
        tokio::pin!(serving);
        let largest = tokio::select! {
            end = &mut serving => panic!("serving the directing child ended: {end:?}"),
            largest = child => largest,
        };
        let end = tokio::time::timeout(TIMEOUT, serving)
            .await
            .expect("serving ends once the child is gone");
        assert!(matches!(end, ChildEnd::Gone), "{end:?}");
        let parts = table_messages(&env.sup.snapshot(), TABLE_PART);
        let sizes: Vec<usize> = parts
            .iter()
            .map(|m| serde_json::to_vec(m).map_or(0, |j| j.len()))
            .collect();
        eprintln!(
            "{SERVICES} services with 4 KiB control-byte statuses: largest link message {largest} \
             bytes; the table goes in {} messages of {sizes:?} bytes",
            parts.len()
        );
        assert!(largest <= TABLE_PART + 256, "{largest} bytes");
        for _ in 0..SERVICES {
            env.reported_pid("pid ").await;
        }
    });
}

#[test]
fn tables_go_in_parts_that_fit_a_small_link_and_a_message_it_cannot_carry_ends_serving() {
    use supervisor::remote::{ChildEnd, ChildPolicy, FdStore, Link};
    use supervisor::upward::UpwardNotifier;
    scenario("info,child=off", async |env| {
        let mut store = FdStore::default();
        let policy = ChildPolicy::programs(vec![PathBuf::from(HELPER)]);
        let upward = UpwardNotifier::disabled();
        let sup = env.sup.clone();
        let service = child_service(&sup, &policy, &upward, None);
        // A link whose send buffer takes far less than a part of a table (as with
        // net.core.wmem_max set low, for a root without privileges).
        let (ours, theirs) = supervisor::os::seqpacket_pair().expect("socket pair");
        nix::sys::socket::setsockopt(&ours, nix::sys::socket::sockopt::SndBuf, &4096)
            .expect("SO_SNDBUF");
        let ours = Link::from_fd(ours).expect("link");
        let capacity = ours.capacity();
        assert!(capacity < supervisor::remote::TABLE_PART, "{capacity}");
        let stop = tokio_util::sync::CancellationToken::new();
        const REGISTERED: usize = 100;
        let child = async {
            let parent = welcomed(theirs).await;
            // Registered services with long names: the table outgrows the link many times
            // over, and still reaches the child, in parts.
            for i in 0..REGISTERED {
                let spec = env.spec(&format!("{i:0>200}"), &["wait"]);
                parent.handle.add(spec, Vec::new()).await.expect("add");
            }
            let mut table = parent.handle.subscribe();
            tokio::time::timeout(TIMEOUT, table.wait_for(|t| t.processes.len() == REGISTERED))
                .await
                .expect("the whole table reached the child")
                .expect("the link stays up");
            // An answer it cannot carry: the tail of a process that wrote long lines, 20
            // lines of 1 KiB.
            let mut spec = env.spec("writer", &["long-line", "1", "wait"]);
            spec.readiness = Readiness::None;
            parent.handle.add(spec, Vec::new()).await.expect("add");
            parent.handle.start("writer").await.expect("start");
            let deadline = std::time::Instant::now() + TIMEOUT;
            while env.sup.output_tail("writer").await.map_or(0, |t| t.len()) < 20 {
                assert!(std::time::Instant::now() < deadline, "no tail");
                tokio::time::sleep(ms(5)).await;
            }
            let tail = tokio::time::timeout(TIMEOUT, parent.handle.output_tail("writer")).await;
            assert!(
                matches!(tail, Ok(Err(SupervisorError::Gone))),
                "the link ends, and the call with it: {tail:?}"
            );
            parent.largest_message()
        };
        let (end, largest) = tokio::join!(
            supervisor::remote::serve_child(ours, 1, &service, &mut store, stop.clone()),
            child
        );
        eprintln!(
            "a link of {capacity} bytes carried tables of {REGISTERED} processes in messages of \
             {largest} bytes at most; then: {end:?}"
        );
        assert!(largest <= capacity);
        match end {
            ChildEnd::LinkFailed(why) => {
                let why = why.to_string();
                assert!(
                    why.contains("cannot send an answer") && why.contains("exceeds the link's"),
                    "{why}"
                )
            }
            other => panic!("serving ended otherwise: {other:?}"),
        }
        env.reported_pid("pid ").await;
    });
}

#[test]
fn a_directing_child_gets_only_its_command_lines_run_and_its_extensions_cut() {
    use supervisor::command_line::{Arg, CommandLine};
    use supervisor::remote::MAX_EXTENSION;
    use supervisor::remote::{ChildEnd, ChildPolicy, FdStore, Link};
    use supervisor::upward::{Upward, UpwardNotifier};
    scenario("info,child=off", async |env| {
        let mut store = FdStore::default();
        let mut policy = ChildPolicy::programs(vec![PathBuf::from(HELPER)]);
        // Exactly what `Env::spec` builds for the verb `wait`.
        let shape = CommandLine::program(HELPER)
            .flag("report")
            .then(Arg::FileIn(env.dir.clone()))
            .flag("gate")
            .then(Arg::FileIn(env.dir.clone()))
            .flag("list-fds")
            .then(Arg::FileIn(env.dir.clone()))
            .flag("wait");
        policy.command_lines = Some(vec![shape]);
        let (passed_tx, mut passed) = tokio::sync::mpsc::unbounded_channel();
        let upward = UpwardNotifier::forwarding(passed_tx);
        let sup = env.sup.clone();
        let service = child_service(&sup, &policy, &upward, None);
        let (ours, theirs) = Link::pair().expect("link");
        let stop = tokio_util::sync::CancellationToken::new();
        let child = async {
            let parent = welcomed(theirs).await;
            type Edit = fn(&mut Vec<OsString>);
            let rows: [(&str, Edit, bool); 5] = [
                ("its own shape", |_| {}, true),
                ("-cX", |a| a.insert(1, "-c/tmp/evil.lua".into()), false),
                (
                    "--config=X",
                    |a| a.insert(1, "--config=/tmp/evil.lua".into()),
                    false,
                ),
                ("a positional directory", |a| a.push("/tmp".into()), false),
                (
                    "a file outside its directory",
                    |a| a[2] = "/tmp/reports".into(),
                    false,
                ),
            ];
            for (i, (what, edit, allowed)) in rows.into_iter().enumerate() {
                let mut spec = env.spec(&format!("row{i}"), &["wait"]);
                edit(&mut spec.argv);
                let added = parent.handle.add(spec, Vec::new()).await;
                match (added, allowed) {
                    (Ok(_), true) => {}
                    (Err(SupervisorError::Refused(why)), false) => {
                        assert!(
                            why.contains("may not run the command line"),
                            "{what}: {why}"
                        );
                    }
                    (other, _) => panic!("{what}: {other:?}"),
                }
            }
            // What goes upward, in order: the hour cut to the bound, 30 s as it was.
            let rows = [
                (Duration::from_secs(3600), MAX_EXTENSION),
                (Duration::from_secs(30), Duration::from_secs(30)),
            ];
            for (asked, expected) in rows {
                parent.upward.extend_timeout(asked);
                let note = tokio::time::timeout(TIMEOUT, passed.recv())
                    .await
                    .expect("passed upward in time");
                assert_eq!(note, Some(Upward::ExtendTimeout(expected)), "{asked:?}");
            }
        };
        let serving = supervisor::remote::serve_child(ours, 1, &service, &mut store, stop.clone());
        let (end, ()) = tokio::join!(serving, child);
        assert!(matches!(end, ChildEnd::Gone), "{end:?}");
    });
}

/// Both ends of a link own their tasks. The child stops its link's task and waits for it:
/// a call still waiting is answered `Gone`. The parent's serving ends with the child, and so
/// does the task of a call that was never answered (here a re-execution request nobody
/// answers): when serving returns, that task has let go of what it waited on.
#[test]
fn each_side_of_a_link_ends_its_own_tasks() {
    use supervisor::remote::{ChildEnd, ChildPolicy, FdStore, Link};
    use supervisor::upward::UpwardNotifier;
    scenario("info,child=off", async |env| {
        let mut store = FdStore::default();
        let policy = ChildPolicy::programs(vec![PathBuf::from(HELPER)]);
        let upward = UpwardNotifier::forwarding(tokio::sync::mpsc::unbounded_channel().0);
        let (reexec_tx, mut reexec_rx) = tokio::sync::mpsc::unbounded_channel();
        let sup = env.sup.clone();
        let service = child_service(&sup, &policy, &upward, Some(&reexec_tx));
        let (ours, theirs) = Link::pair().expect("link");
        let stop = tokio_util::sync::CancellationToken::new();
        let child = async {
            let parent = welcomed(theirs).await;
            let link = parent.link_task();
            let handle = parent.handle.clone();
            let asked = handle.request_reexec();
            tokio::pin!(asked);
            let request = tokio::select! {
                answered = &mut asked => panic!("answered before anyone decided: {answered:?}"),
                request = reexec_rx.recv() => request.expect("the request reaches the parent"),
            };
            tokio::time::timeout(TIMEOUT, link.stop())
                .await
                .expect("the link's task ends when its owner stops it");
            assert!(
                matches!(asked.await, Err(SupervisorError::Gone)),
                "a call waiting when the link stopped is answered Gone"
            );
            assert!(parent.gone.is_cancelled(), "the link is gone");
            drop(parent);
            request
        };
        let serving = supervisor::remote::serve_child(ours, 1, &service, &mut store, stop.clone());
        let (end, request) = tokio::join!(serving, child);
        assert!(matches!(end, ChildEnd::Gone), "{end:?}");
        assert!(
            request.reply.is_closed(),
            "the call's task ended with serving, not left waiting for an answer"
        );
    });
}

#[test]
fn garbage_oversize_and_fd_carrying_notifications_do_not_break_the_socket() {
    scenario("debug,child=info", async |env| {
        let verbs = [
            "notify-garbage",
            "notify-oversize",
            "notify",
            "STATUS=after the junk",
            "wait",
            "notify-with-fd",
            "READY=1",
            "wait",
        ];
        let spec = env.notify_spec("svc", &verbs, TIMEOUT);
        env.sup.add(spec, Vec::new()).await.expect("add");
        let devnull_before = open_fds_to("/dev/null");
        let sup = env.sup.clone();
        let start = tokio::spawn(async move { sup.start("svc").await });
        let pid = env.reported_pid("pid ").await;
        let p = env
            .wait_state("svc", "past the junk", |p| {
                p.status_text.as_deref() == Some("after the junk")
            })
            .await;
        // The oversize datagram began with READY=1: it must have been dropped whole.
        assert_eq!(p.state, "starting");
        // Counted, and logged in summaries.
        env.logs
            .wait_for("every piece of junk counted", |text| {
                noise_counted(text, "malformed datagrams") == 6
                    && noise_counted(text, "oversize or truncated datagrams") == 1
            })
            .await;
        env.release_one();
        let ready = start.await.expect("join").expect("start");
        assert_eq!(ready.as_raw(), pid);
        env.logs
            .wait_for("the descriptor counted", |text| {
                noise_counted(text, "descriptors received and closed") == 1
            })
            .await;
        // The descriptor that came with READY=1 is closed, not kept (by the closer thread, so
        // polled for, with a deadline).
        let deadline = std::time::Instant::now() + TIMEOUT;
        while open_fds_to("/dev/null") != devnull_before {
            assert!(
                std::time::Instant::now() < deadline,
                "the descriptor sent with READY=1 is still open"
            );
            tokio::time::sleep(ms(5)).await;
        }
    });
}

/// How many of our descriptors point at `target`.
fn open_fds_to(target: &str) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.flatten()
                .filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == Path::new(target)))
                .count()
        })
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Stopping, process groups and orphans
// ---------------------------------------------------------------------------------------------

#[test]
fn a_stopped_process_is_continued_so_that_it_can_handle_sigterm() {
    scenario("debug,child=info", async |env| {
        let verbs = ["trap-term", "notify", "READY=1", "stop-me", "wait"];
        let mut spec = env.notify_spec("svc", &verbs, TIMEOUT);
        spec.stop.timeout = Duration::from_secs(5);
        env.sup.add(spec, Vec::new()).await.expect("add");
        env.sup.start("svc").await.expect("start");
        env.report("stopped").await;
        // SIGTERM alone would stay pending in a stopped process until the SIGKILL; like
        // systemd, the supervisor follows the stop signal with SIGCONT, so the handler runs
        // and the process exits cleanly.
        assert_eq!(env.sup.stop("svc").await.expect("stop"), code(0));
        env.reported_pid("pid ").await;
    });
}

#[test]
fn sigterm_ignored_escalates_to_sigkill_of_the_whole_group() {
    scenario("debug,child=info", async |env| {
        let verbs = [
            "ignore-term",
            "kids",
            "2",
            "group",
            "notify",
            "READY=1",
            "wait",
        ];
        let mut spec = env.notify_spec("svc", &verbs, TIMEOUT);
        spec.stop.timeout = ms(200);
        env.sup.add(spec, Vec::new()).await.expect("add");
        env.sup.start("svc").await.expect("start");
        let kids = [
            env.reported_pid("kid ").await,
            env.reported_pid("kid ").await,
        ];
        assert_eq!(
            env.sup.stop("svc").await.expect("stop"),
            signaled(Signal::SIGKILL)
        );
        env.logs.wait_for_line(&["sent SIGKILL"]).await;
        // The grandchildren ignored SIGTERM too; the group's SIGKILL got them, and they were
        // reaped by us once their parent was gone.
        for kid in kids {
            env.logs
                .wait_for_line(&["reaped an orphaned process", &format!("pid={kid} ")])
                .await;
        }
    });
}

#[test]
fn grandchildren_in_the_group_die_with_a_process_that_exits() {
    scenario("debug,child=info", async |env| {
        let verbs = ["kids", "3", "group+stdout+forever", "wait", "exit", "0"];
        let mut spec = env.spec("svc", &verbs);
        spec.restart = RestartPolicy::Never;
        env.sup.add(spec, Vec::new()).await.expect("add");
        env.sup.start("svc").await.expect("start");
        let main = env.reported_pid("pid ").await;
        let mut kids = Vec::new();
        for _ in 0..3 {
            kids.push(env.reported_pid("kid ").await);
        }
        // The main process exits; its grandchildren would run forever (holding its stdout)
        // if the supervisor did not sweep the group.
        env.release_one();
        let p = env
            .wait_state("svc", "exited", |p| p.state == "exited")
            .await;
        assert_eq!(p.last_exit, code(0));
        env.logs
            .wait_for_line(&["process exited", &format!("pid={main} ")])
            .await;
        for kid in kids {
            env.logs
                .wait_for_line(&["reaped an orphaned process", &format!("pid={kid} ")])
                .await;
        }
    });
}

#[test]
fn shutdown_ends_only_once_the_group_of_an_exited_process_is_reaped() {
    scenario("debug,child=info", async |env| {
        // Grandchildren that take a while to die: 512 MiB each for the kernel to tear down.
        let verbs = ["kids", "2", "group+forever+hog", "wait", "exit", "0"];
        let mut spec = env.spec("svc", &verbs);
        spec.restart = RestartPolicy::Never;
        env.sup.add(spec, Vec::new()).await.expect("add");
        env.sup.start("svc").await.expect("start");
        env.reported_pid("kid ").await;
        env.reported_pid("kid ").await;
        // The main process exits; the supervisor sweeps its group with SIGKILL. The harness
        // shuts down right after: shutdown must wait for the dying grandchildren and reap
        // them, or they would outlive the supervisor (as zombies of the test process).
        env.release_one();
        env.wait_state("svc", "exited", |p| p.state == "exited")
            .await;
    });
}

#[test]
fn orphaned_grandchildren_in_their_own_session_are_reaped_by_us() {
    scenario("debug,child=info", async |env| {
        let verbs = ["kids", "2", "setsid+orphan", "notify", "READY=1", "wait"];
        let spec = env.notify_spec("svc", &verbs, TIMEOUT);
        env.sup.add(spec, Vec::new()).await.expect("add");
        env.sup.start("svc").await.expect("start");
        let kids = [
            env.reported_pid("kid ").await,
            env.reported_pid("kid ").await,
        ];
        let me = std::process::id() as i32;
        for kid in kids {
            let stat = proc_stat(kid).expect("orphan alive");
            assert_eq!(
                stat.ppid, me,
                "orphan {kid} was not reparented to the subreaper"
            );
        }
        // Stopping the service signals its group only: orphans in another session survive,
        // as they would under any supervisor without cgroups.
        env.sup.stop("svc").await.expect("stop");
        for kid in kids {
            assert!(
                proc_stat(kid).is_some_and(|s| s.state != 'Z'),
                "orphan {kid} should still run"
            );
        }
        env.release_all();
        for kid in kids {
            env.logs
                .wait_for_line(&[
                    "reaped an orphaned process",
                    &format!("pid={kid} "),
                    "exit code 0",
                ])
                .await;
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------------------------

#[test]
fn an_orphan_holding_stdout_open_delays_neither_restart_nor_stop() {
    scenario("debug,child=info", async |env| {
        // Each incarnation leaves an orphan in its own session that keeps the write end of
        // its stdout pipe: the pipe never reaches EOF while the orphan lives.
        let verbs = [
            "kids",
            "1",
            "setsid+orphan+stdout",
            "notify",
            "READY=1",
            "wait",
        ];
        let spec = env.notify_spec("svc", &verbs, TIMEOUT);
        env.sup.add(spec, Vec::new()).await.expect("add");
        let first = env.sup.start("svc").await.expect("start");
        let second = env.sup.restart("svc").await.expect("restart");
        assert_ne!(first, second);
        assert_eq!(
            env.sup.stop("svc").await.expect("stop"),
            signaled(Signal::SIGTERM)
        );
        let orphans = [
            env.reported_pid("kid ").await,
            env.reported_pid("kid ").await,
        ];
        env.release_all();
        for kid in orphans {
            env.logs
                .wait_for_line(&["reaped an orphaned process", &format!("pid={kid} ")])
                .await;
        }
    });
}

#[test]
fn flooding_stdout_and_stderr_never_blocks_the_child() {
    // Child lines are not captured: 60 MiB of them would only slow the test down.
    scenario("debug,child=off", async |env| {
        let out = env.spec("out", &["flood", "50", "stdout", "wait"]);
        let err = env.spec("err", &["flood", "10", "stderr", "wait"]);
        env.sup.add(out, Vec::new()).await.expect("add");
        env.sup.add(err, Vec::new()).await.expect("add");
        env.sup.start("out").await.expect("start");
        env.sup.start("err").await.expect("start");
        // Each helper reports once it has written everything: nobody waits on a full pipe.
        env.report("flooded").await;
        env.report("flooded").await;
    });
}

#[test]
fn invalid_utf8_and_huge_lines_are_logged_lossily_in_bounded_pieces() {
    scenario("debug,child=info", async |env| {
        let verbs = [
            "invalid-utf8",
            "long-line",
            "1",
            "notify",
            "READY=1",
            "wait",
        ];
        let spec = env.notify_spec("svc", &verbs, TIMEOUT);
        env.sup.add(spec, Vec::new()).await.expect("add");
        env.sup.start("svc").await.expect("start");
        env.logs
            .wait_for_line(&["stream=\"stdout\"", "bad \u{fffd}\u{fffd}\u{fffd}( bytes"])
            .await;
        let piece = "L".repeat(supervisor::output::MAX_LINE);
        let too_long = "L".repeat(supervisor::output::MAX_LINE + 1);
        env.logs
            .wait_for("1 MiB line in 4 KiB pieces", |text| {
                text.lines().filter(|l| l.contains(&piece)).count()
                    == (1 << 20) / supervisor::output::MAX_LINE
            })
            .await;
        assert!(!env.logs.text().contains(&too_long));
    });
}

// ---------------------------------------------------------------------------------------------
// One-shot jobs
// ---------------------------------------------------------------------------------------------

#[test]
fn one_shot_jobs_report_how_they_ended() {
    scenario("debug,child=info", async |env| {
        let job = |name: &str, verbs: &[&str]| {
            let mut spec = env.spec(name, verbs);
            spec.restart = RestartPolicy::Never;
            spec.success_codes = BTreeSet::from([0, 3]);
            spec
        };
        let expected_code = job("job", &["exit", "3"]);
        assert!(expected_code.is_success(ExitStatus::Code(3)));
        assert_eq!(env.sup.run(expected_code).await, Ok(ExitStatus::Code(3)));
        // The job is forgotten once done, so the same name can run again.
        assert!(env.process("job").is_none());
        let unexpected = job("job", &["exit", "4"]);
        assert_eq!(env.sup.run(unexpected).await, Ok(ExitStatus::Code(4)));
        let killed = job("job", &["die", "KILL"]);
        assert_eq!(
            env.sup.run(killed).await.map(Some),
            Ok(signaled(Signal::SIGKILL))
        );
        let mut missing = job("job", &[]);
        missing.argv = vec!["/nonexistent/program".into()];
        assert!(matches!(
            env.sup.run(missing).await,
            Err(SupervisorError::StartFailed { .. })
        ));
        assert!(env.sup.snapshot().processes.is_empty());
        for _ in 0..3 {
            env.reported_pid("pid ").await;
        }
    });
}

#[test]
fn a_forgotten_job_still_tells_what_it_said_last() {
    scenario("debug,child=info", async |env| {
        let mut job = env.spec("loader", &["print", "error parsing zone file", "exit", "1"]);
        job.restart = RestartPolicy::Never;
        assert_eq!(env.sup.run(job).await, Ok(ExitStatus::Code(1)));
        assert!(env.process("loader").is_none(), "forgotten");
        // The line may still be on its way from the pipe when the exit is reported.
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        loop {
            let tail = env.sup.output_tail("loader").await.expect("a tail");
            if tail.iter().any(|l| l == "error parsing zone file") {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{tail:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(matches!(
            env.sup.output_tail("never-ran").await,
            Err(SupervisorError::UnknownService(_))
        ));
    });
}

// ---------------------------------------------------------------------------------------------
// Descriptors
// ---------------------------------------------------------------------------------------------

#[test]
fn children_inherit_only_stdio_and_the_descriptors_passed_on_purpose() {
    scenario("debug,child=info", async |env| {
        // A descriptor we pass on purpose, and one we do not (close-on-exec, as std opens).
        let (passed_r, _passed_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
        let _not_passed = std::fs::File::open("/dev/null").expect("open");
        use std::os::fd::AsRawFd;
        let passed = passed_r.as_raw_fd();
        env.allowed_fds.insert(passed);
        let spec = env.notify_spec("a", &["notify", "READY=1", "wait"], TIMEOUT);
        env.sup.add(spec, vec![passed]).await.expect("add");
        // A second service while the first one's pipes are open: none of them may leak.
        let spec = env.notify_spec("b", &["notify", "READY=1", "wait"], TIMEOUT);
        env.sup.add(spec, Vec::new()).await.expect("add");
        let a = env.sup.start("a").await.expect("start a");
        let b = env.sup.start("b").await.expect("start b");
        let listing = |pid: Pid| {
            std::fs::read_to_string(env.dir.join("fds").join(pid.to_string())).expect("listing")
        };
        let fds_of = |text: &str| -> BTreeSet<i32> {
            text.lines()
                .filter_map(|l| l.split(' ').next()?.parse().ok())
                .collect()
        };
        assert_eq!(fds_of(&listing(a)), BTreeSet::from([0, 1, 2, passed]));
        assert_eq!(fds_of(&listing(b)), BTreeSet::from([0, 1, 2]));
        // The harness allows `passed` in every helper, which is why b is checked here.
        env.reported_pid("pid ").await;
        env.reported_pid("pid ").await;
    });
}

#[test]
fn children_get_exactly_the_environment_of_their_spec() {
    scenario("debug,child=info", async |env| {
        let envdir = env.dir.join("env");
        std::fs::create_dir_all(&envdir).expect("env dir");
        let verbs = [
            "list-env",
            envdir.to_str().expect("utf-8"),
            "notify",
            "READY=1",
            "wait",
        ];
        let mut spec = env.notify_spec("svc", &verbs, TIMEOUT);
        spec.env = vec![
            ("FOO".into(), "bar".into()),
            // Ours to set for a notify service: it cannot point its notifications elsewhere.
            ("NOTIFY_SOCKET".into(), "/somewhere/else".into()),
        ];
        env.sup.add(spec, Vec::new()).await.expect("add");
        let pid = env.sup.start("svc").await.expect("start");
        let text = std::fs::read_to_string(envdir.join(pid.to_string())).expect("env listing");
        let got: BTreeSet<&str> = text.lines().collect();
        // Nothing of the test process's environment (CARGO_*, PATH, HOME …) is inherited.
        let socket = format!("NOTIFY_SOCKET={}", env.dir.join("notify.sock").display());
        assert_eq!(got, BTreeSet::from(["FOO=bar", socket.as_str()]));
        env.reported_pid("pid ").await;
    });
}

// ---------------------------------------------------------------------------------------------
// Shutdown
// ---------------------------------------------------------------------------------------------

#[test]
fn shutdown_stops_everything_in_parallel() {
    scenario("debug,child=info", async |env| {
        for name in ["a", "b", "c"] {
            let spec = env.notify_spec(name, &["notify", "READY=1", "wait"], TIMEOUT);
            env.sup.add(spec, Vec::new()).await.expect("add");
            env.sup.start(name).await.expect("start");
        }
        let mut slow = env.notify_spec(
            "slow",
            &["ignore-term", "notify", "READY=1", "wait"],
            TIMEOUT,
        );
        slow.stop.timeout = ms(300);
        env.sup.add(slow, Vec::new()).await.expect("add");
        env.sup.start("slow").await.expect("start");
        let report = env.sup.shutdown().await.expect("shutdown");
        assert_eq!(report.unclean, vec!["slow".to_owned()]);
        let snap = env.sup.snapshot();
        assert!(snap.shutting_down);
        for p in &snap.processes {
            let expected = if p.name == "slow" {
                signaled(Signal::SIGKILL)
            } else {
                signaled(Signal::SIGTERM)
            };
            assert_eq!(
                (p.state.as_str(), p.last_exit),
                ("idle", expected),
                "{}",
                p.name
            );
        }
        for _ in 0..4 {
            env.reported_pid("pid ").await;
        }
    });
}

#[test]
fn shutdown_refuses_new_work_and_kill_all_kills_at_once() {
    scenario("debug,child=info", async |env| {
        let names = ["a", "b", "c"];
        for name in names {
            let mut spec =
                env.notify_spec(name, &["ignore-term", "notify", "READY=1", "wait"], TIMEOUT);
            // Far longer than the test may take: only kill_all can end these.
            spec.stop.timeout = Duration::from_secs(3600);
            env.sup.add(spec, Vec::new()).await.expect("add");
            env.sup.start(name).await.expect("start");
        }
        let sup = env.sup.clone();
        let shutdown = tokio::spawn(async move { sup.shutdown().await });
        // All three are stopping at the same time: the stops run in parallel.
        let mut rx = env.sup.subscribe();
        tokio::time::timeout(
            TIMEOUT,
            rx.wait_for(|s| {
                s.shutting_down
                    && s.processes.len() == 3
                    && s.processes.iter().all(|p| p.state == "stopping")
            }),
        )
        .await
        .expect("all stopping")
        .expect("supervisor alive");
        assert_eq!(env.sup.start("a").await, Err(SupervisorError::ShuttingDown));
        assert_eq!(
            env.sup.restart("b").await,
            Err(SupervisorError::ShuttingDown)
        );
        let job = env.spec("job", &["exit", "0"]);
        assert_eq!(env.sup.run(job).await, Err(SupervisorError::ShuttingDown));
        env.sup.kill_all();
        let report = shutdown.await.expect("join").expect("shutdown");
        assert_eq!(report.unclean, vec!["a", "b", "c"]);
        for p in &env.sup.snapshot().processes {
            assert_eq!(p.last_exit, signaled(Signal::SIGKILL), "{}", p.name);
        }
        for _ in 0..3 {
            env.reported_pid("pid ").await;
        }
    });
}

#[test]
fn a_remote_caller_commands_the_supervisor_and_its_store_outlives_it() {
    use std::os::fd::AsRawFd;
    use supervisor::remote::{ChildEnd, ChildPolicy, FdStore, Link};
    use supervisor::upward::UpwardNotifier;
    scenario("debug,child=info", async |env| {
        let mut store = FdStore::default();
        let policy = ChildPolicy::programs(vec![PathBuf::from(HELPER)]);
        let upward = UpwardNotifier::disabled();
        let sup = env.sup.clone();
        let (reexec_tx, mut reexec_rx) = tokio::sync::mpsc::unbounded_channel();
        let service = child_service(&sup, &policy, &upward, Some(&reexec_tx));
        // The parent's owner answers re-execution requests: the first is refused, with why.
        let owner = tokio::spawn(async move {
            let first: supervisor::remote::ReexecRequest =
                reexec_rx.recv().await.expect("a request");
            let refused = supervisor::remote::ReexecRefused("the new binary is broken".into());
            let _ = first.reply.send(Err(refused));
            let second = reexec_rx.recv().await.expect("a request");
            let _ = second.reply.send(Ok(()));
        });
        // The first incarnation: a descriptor handed to a service at a number of its choice,
        // and one stored for later.
        let (ours, theirs) = Link::pair().expect("link");
        let stop = tokio_util::sync::CancellationToken::new();
        let child = async {
            let parent = welcomed(theirs).await;
            assert_eq!(parent.incarnation, 1);
            assert!(parent.stored.is_empty());
            let (read, _write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
            parent.store("kept", &read).await.expect("store");
            let (handed, _w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
            // Not a number the helper would get anyway, and not ours in the child.
            let at = handed.as_raw_fd() + 40;
            let spec = env.notify_spec("remote", &["notify", "READY=1", "wait"], TIMEOUT);
            parent
                .handle
                .add_handing(spec, vec![(handed, at)])
                .await
                .expect("add");
            let pid = parent.handle.start("remote").await.expect("start");
            // The snapshot travels back.
            let mut table = parent.handle.subscribe();
            table
                .wait_for(|s| s.processes.iter().any(|p| p.pid == Some(pid.as_raw())))
                .await
                .expect("snapshot");
            // A program outside the policy is refused.
            let mut bad = ServiceSpec::new("bad", "test", vec!["/bin/sh".into()]);
            bad.readiness = Readiness::None;
            let err = parent
                .handle
                .add(bad, Vec::new())
                .await
                .expect_err("refused");
            assert!(err.to_string().contains("may not run"), "{err}");
            // A re-execution request reaches the parent's owner, and its answer comes back.
            let refused = parent.handle.request_reexec().await.expect_err("refused");
            assert!(
                refused.to_string().contains("the new binary is broken"),
                "{refused}"
            );
            parent.handle.request_reexec().await.expect("begins");
            parent.exit(7).await.expect("exit");
            (pid, at)
        };
        let (end, (pid, at)) = tokio::join!(
            supervisor::remote::serve_child(ours, 1, &service, &mut store, stop.clone()),
            child
        );
        assert!(matches!(end, ChildEnd::Exit(7)), "{end:?}");
        owner.await.expect("the owner saw both requests");
        env.allowed_fds.insert(at);
        let listing =
            std::fs::read_to_string(env.dir.join("fds").join(pid.to_string())).expect("listing");
        assert!(
            listing
                .lines()
                .any(|l| l.starts_with(&format!("{at} pipe:"))),
            "the handed pipe at {at}:\n{listing}"
        );
        env.reported_pid("pid ").await;
        // The next incarnation finds what the first stored, and the running service.
        assert_eq!(store.len(), 1);
        let (ours, theirs) = Link::pair().expect("link");
        let child = async {
            let parent = welcomed(theirs).await;
            assert_eq!(parent.incarnation, 2);
            let names: Vec<&str> = parent.stored.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names, ["kept"]);
            assert!(parent
                .handle
                .snapshot()
                .processes
                .iter()
                .any(|p| p.name == "remote" && p.pid == Some(pid.as_raw())));
            // A kill's reason is cut to what a status may carry, whatever the child sends.
            parent
                .handle
                .kill("remote", &"r".repeat(100_000))
                .await
                .expect("kill");
            let mut table = parent.handle.subscribe();
            let table = table
                .wait_for(|s| {
                    s.processes
                        .iter()
                        .any(|p| p.name == "remote" && p.kill_reason.is_some())
                })
                .await
                .expect("snapshot")
                .clone();
            let reason = table
                .processes
                .iter()
                .find_map(|p| p.kill_reason.clone())
                .expect("a reason");
            assert_eq!(reason.len(), supervisor::remote::MAX_STATUS);
            drop(parent);
        };
        let (end, ()) = tokio::join!(
            supervisor::remote::serve_child(ours, 2, &service, &mut store, stop.clone()),
            child
        );
        assert!(matches!(end, ChildEnd::Gone), "{end:?}");
        env.release_all();
    });
}

#[test]
fn children_die_with_the_supervisor_process() {
    // A supervisor process (pid1-demo) runs the helper, then is SIGKILLed: the kernel kills
    // the helper too (PR_SET_PDEATHSIG), so nothing goes on serving after its supervisor.
    // Its zombie may be reparented to us (a subreaper): one scenario at a time, and reap it.
    let _serial: MutexGuard<()> = ONE_SUPERVISOR_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("supervisor-pdeathsig-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    mkfifo(&dir.join("reports"));
    // Read-write, so that opening never blocks and the FIFO never ends.
    let reports = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join("reports"))
        .expect("open reports");
    let mut demo = std::process::Command::new(env!("CARGO_BIN_EXE_pid1-demo"))
        .arg(dir.join("notify.sock"))
        .arg(HELPER)
        .args(["report"])
        .arg(dir.join("reports"))
        .args(["notify", "READY=1", "sleep", "600000"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("pid1-demo");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(reports), &mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(TIMEOUT).expect("the helper reports");
    let helper: i32 = line
        .trim()
        .strip_prefix("pid ")
        .and_then(|p| p.parse().ok())
        .expect("pid line");
    demo.kill().expect("SIGKILL the supervisor");
    demo.wait().expect("reap it");
    let deadline = std::time::Instant::now() + TIMEOUT;
    let gone = loop {
        match proc_stat(helper) {
            None => break true,
            Some(stat) if stat.state == 'Z' => break true,
            Some(_) if std::time::Instant::now() >= deadline => break false,
            Some(_) => std::thread::yield_now(),
        }
    };
    if !gone {
        let _ = nix::sys::signal::kill(Pid::from_raw(helper), nix::sys::signal::Signal::SIGKILL);
    }
    kill_and_reap_descendants();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(gone, "the helper outlived its supervisor");
}

// ---------------------------------------------------------------------------------------------
// Steering
// ---------------------------------------------------------------------------------------------

/// Two UDP sockets in one `SO_REUSEPORT` group on a free loopback port, index 0 and 1.
fn reuseport_pair() -> Vec<std::net::UdpSocket> {
    use nix::sys::socket::{bind, setsockopt, socket, sockopt};
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, SockaddrIn};
    use std::os::fd::AsRawFd;
    let mut port = 0;
    let mut out = Vec::new();
    for _ in 0..2 {
        let s = socket(
            AddressFamily::Inet,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .expect("socket");
        setsockopt(&s, sockopt::ReusePort, &true).expect("SO_REUSEPORT");
        bind(s.as_raw_fd(), &SockaddrIn::new(127, 0, 0, 1, port)).expect("bind");
        let s = std::net::UdpSocket::from(s);
        port = s.local_addr().expect("address").port();
        s.set_nonblocking(true).expect("non-blocking");
        out.push(s);
    }
    out
}

#[test]
fn a_steered_service_is_stopped_once_its_queue_is_empty() {
    scenario("debug,child=info", async |env| {
        use std::os::fd::{AsFd, AsRawFd, OwnedFd};
        use supervisor::os::{queued, SocketType};
        let group = reuseport_pair();
        for (index, name) in [(0u32, "a"), (1, "b")] {
            let mut spec = env.spec(name, &["trap-term", "wait"]);
            spec.reuseport_index = Some(index);
            let handed: OwnedFd = group[index as usize].try_clone().expect("dup").into();
            let at = handed.as_raw_fd();
            env.allowed_fds.insert(at);
            env.sup
                .add_handing(spec, vec![(handed, at)])
                .await
                .expect("add");
            env.sup.start(name).await.expect("start");
            env.reported_pid("pid ").await;
            env.wait_state(name, "taking queries", |p| p.takes_queries == Some(true))
                .await;
        }
        // Neither helper reads its socket: send until b's queue holds something.
        let to = group[0].local_addr().expect("address");
        let mut sent = 0;
        while queued(group[1].as_fd(), SocketType::Datagram).expect("FIONREAD") == 0 {
            assert!(sent < 1000, "nothing reached b's socket");
            // A new source port each time: the program picks at random anyway.
            let client = std::net::UdpSocket::bind("127.0.0.1:0").expect("client");
            client.send_to(b"query", to).expect("send");
            sent += 1;
        }
        let sup = env.sup.clone();
        let stopping = tokio::spawn(async move { sup.stop("b").await });
        // Steered away from at once, but not signalled while a query waits in its queue.
        env.wait_state("b", "steered away", |p| p.takes_queries == Some(false))
            .await;
        env.logs
            .wait_for_line(&["queues not empty yet; waiting", "name=\"b\""])
            .await;
        let b = env.process("b").expect("b");
        assert_eq!(b.state, "running", "{b:?}");
        assert!(queued(group[1].as_fd(), SocketType::Datagram).expect("FIONREAD") > 0);
        assert_eq!(env.process("a").and_then(|p| p.takes_queries), Some(true));
        // Its queue emptied (we read it for the helper), the stop goes ahead: SIGTERM, exit 0.
        let mut buf = [0u8; 64];
        while group[1].recv(&mut buf).is_ok() {}
        let down = tokio::time::timeout(TIMEOUT, stopping)
            .await
            .expect("stopped")
            .expect("task")
            .expect("stop");
        assert_eq!(down, Some(ExitStatus::Code(0)));
        env.logs
            .wait_for_line(&["queues drained; stopping", "name=\"b\""])
            .await;
        // The one left is stopped at once: nobody could take its share.
        env.sup.stop("a").await.expect("stop a");
        let text = env.logs.text();
        assert!(
            !text
                .lines()
                .any(|l| l.contains("steered away from") && l.contains("name=\"a\"")),
            "{text}"
        );
    });
}
