//! The supervisor as PID 1 of a new PID namespace (`unshare --pid --fork --mount-proc`, which
//! needs root): the `pid1-demo` init runs a `misbehave` child that double-forks orphans in
//! sessions of their own. The orphans are reparented to PID 1, which must reap them (no
//! zombies in the namespace), and a SIGTERM to PID 1 must stop its service and exit 0, which
//! takes down the orphans still running with the namespace.
//!
//! This binary runs no supervisor of its own; it waits for `unshare` with std as any parent
//! does. Steps are ordered by FIFOs and the init's log lines, never by sleeps.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::sys::stat::Mode;
use nix::unistd::Pid;

const DEMO: &str = env!("CARGO_BIN_EXE_pid1-demo");
const HELPER: &str = env!("CARGO_BIN_EXE_misbehave");
const TIMEOUT: Duration = Duration::from_secs(30);

/// Lines of a stream, read on a thread of their own, kept so they can be searched again.
struct Lines {
    rx: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Lines {
    fn read(stream: impl std::io::Read + Send + 'static) -> Lines {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines {
            rx,
            seen: Vec::new(),
        }
    }

    /// Wait for a line containing every one of `parts`.
    fn wait_for(&mut self, parts: &[&str]) -> String {
        let matches = |l: &String| parts.iter().all(|p| l.contains(p));
        if let Some(l) = self.seen.iter().find(|l| matches(l)) {
            return l.clone();
        }
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if matches(&line) {
                        return line;
                    }
                }
                Err(e) => panic!(
                    "no line with {parts:?} ({e}); seen:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }
}

/// `(state, ppid)` of a host pid.
fn stat(pid: i32) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 2..];
    let mut fields = rest.split(' ');
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Every host process below `root`, with its state.
fn tree_below(root: i32) -> Vec<(i32, char)> {
    let all: Vec<(i32, char, i32)> = std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .filter_map(|pid| stat(pid).map(|(s, pp)| (pid, s, pp)))
                .collect()
        })
        .unwrap_or_default();
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for &(pid, state, ppid) in &all {
            if ppid == parent {
                found.push((pid, state));
                frontier.push(pid);
            }
        }
    }
    found
}

/// Kills the namespace (by killing its init) if the test ends early.
struct Namespace {
    /// `unshare`, until the test has waited for it.
    unshare: Option<Child>,
}

impl Namespace {
    fn unshare_pid(&self) -> i32 {
        self.unshare.as_ref().map_or(0, |c| c.id() as i32)
    }

    /// The init of the namespace, as the host sees it: unshare's only child.
    fn init(&self) -> i32 {
        let unshare = self.unshare_pid();
        tree_below(unshare)
            .into_iter()
            .find(|&(pid, _)| stat(pid).is_some_and(|(_, ppid)| ppid == unshare))
            .map(|(pid, _)| pid)
            .expect("namespace init")
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let pid = self.unshare_pid();
        if let Some(mut unshare) = self.unshare.take() {
            for (pid, _) in tree_below(pid) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            let _ = unshare.kill();
            let _ = unshare.wait();
        }
    }
}

fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, Mode::from_bits_truncate(0o600)).expect("mkfifo");
}

fn fifo(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open FIFO")
}

#[test]
fn as_pid1_it_reaps_orphans_and_stops_everything_on_sigterm() {
    let dir: PathBuf = std::env::temp_dir().join(format!("supervisor-pid1-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    for name in ["reports", "orphans-gate", "child-gate"] {
        mkfifo(&dir.join(name));
    }
    let mut reports = Lines::read(fifo(&dir.join("reports")));
    let orphans_gate = fifo(&dir.join("orphans-gate"));
    let _child_gate = fifo(&dir.join("child-gate"));

    let unshare = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", DEMO])
        .arg(dir.join("notify.sock"))
        .args([HELPER, "report"])
        .arg(dir.join("reports"))
        .arg("gate")
        .arg(dir.join("orphans-gate"))
        .args(["kids", "3", "setsid+orphan", "gate"])
        .arg(dir.join("child-gate"))
        .args(["kids", "2", "setsid+orphan", "notify", "READY=1", "wait"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn unshare (util-linux, as root)");
    let mut ns = Namespace {
        unshare: Some(unshare),
    };
    let stderr = ns.unshare.as_mut().and_then(|c| c.stderr.take());
    let mut logs = Lines::read(stderr.expect("stderr"));

    logs.wait_for(&["starting", "pid1=true"]);
    logs.wait_for(&["demo child ready"]);
    // Pids as the namespace sees them.
    let child = reports.wait_for(&["pid "]);
    // Three orphans on the first gate, then two on the gate only the end releases.
    let mut orphans = Vec::new();
    while orphans.len() < 5 {
        let line = reports.wait_for(&["kid "]);
        reports.seen.retain(|l| *l != line);
        orphans.push(line.trim_start_matches("kid ").to_owned());
    }
    // A fresh namespace numbers its processes and threads from 1: the demo is 1, its own
    // threads (the descriptor closer) take the next few, then comes its child. Pids of the
    // host's namespace would be far higher.
    let child_pid: u32 = child
        .trim_start_matches("pid ")
        .trim()
        .parse()
        .expect("a pid");
    assert!(
        (2..=16).contains(&child_pid),
        "the demo's child is one of the namespace's first processes: {child}"
    );

    // The first three exit; PID 1 must reap them.
    drop(orphans_gate);
    let (released, staying) = orphans.split_at(3);
    for pid in released {
        logs.wait_for(&[
            "reaped an orphaned process",
            &format!("pid={pid} "),
            "exit code 0",
        ]);
    }
    let init = ns.init();
    let zombies: Vec<(i32, char)> = tree_below(init)
        .into_iter()
        .filter(|&(_, state)| state == 'Z')
        .collect();
    assert!(zombies.is_empty(), "zombies in the namespace: {zombies:?}");
    let alive = tree_below(init);
    assert_eq!(
        alive.len(),
        1 + staying.len(),
        "only the demo child and the orphans still waiting should be left: {alive:?}"
    );

    // SIGTERM to PID 1: the child is stopped and PID 1 exits 0.
    kill(Pid::from_raw(init), Signal::SIGTERM).expect("SIGTERM to the namespace init");
    logs.wait_for(&["process exited", "name=\"child\"", "SIGTERM"]);
    logs.wait_for(&["stopped cleanly"]);
    let (tx, rx) = mpsc::channel();
    let mut unshare = ns.unshare.take().expect("unshare");
    std::thread::spawn(move || {
        let _ = tx.send(unshare.wait());
    });
    let status = rx
        .recv_timeout(TIMEOUT)
        .expect("unshare did not exit")
        .expect("wait for unshare");
    assert_eq!(status.code(), Some(0), "PID 1 exit status: {status:?}");
    // Nothing of the namespace is left: the orphans still running when PID 1 exited went
    // with it, and none is left unreaped.
    for (pid, _) in alive {
        assert_eq!(stat(pid), None, "process {pid} of the namespace survived");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
