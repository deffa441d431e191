//! A chaos soak of our resolver on real kresd: a steady UDP load, and at a fixed rhythm one
//! fault or change out of many (kills of every kind of process, a manager-task panic, scaling,
//! policy, refused and live changes, reloads, in-place upgrades, hostile bodies, connection
//! bursts), drawn from a seeded schedule so a failure can be replayed with its seed. Each
//! fault waits for its effect (a new pid, an event, a changed answer) with a generous timeout;
//! the rhythm is the schedule, never a way to order events.
//!
//! At the end the promise is checked: no query lost beyond one per killed worker, the root
//! the same process with flat memory and descriptors, no zombie, the last accepted
//! configuration running (the API serves it, DNS answers its policy) and a clean stop. Shared
//! by the `chaos` benchmark (minutes, release build) and the `chaos` test (a minute, debug).

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

use crate::load::{Load, LoadReport, LoadSpec};
use crate::notify::NotifyListener;
use crate::{dns, http, os, procs, Bed, Launched, TestDir};

/// The name the load asks, answered from `local-data` in every configuration of the soak.
const LOAD_NAME: &str = "load.chaos.test.";
const LOAD_ADDRESS: &str = "192.0.2.1";

/// Idle connections of a connection burst.
const BURST_CONNECTIONS: usize = 500;

/// Whose control plane runs the workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlPlane {
    /// Our daemon: every kind of fault.
    Ours,
    /// Upstream's manager and supervisord, installed in the bed: the faults that apply to it
    /// ([`FaultKind::UPSTREAM`]), for a comparison of lost queries.
    Upstream,
}

impl ControlPlane {
    /// The kinds of fault drawn for this control plane.
    pub fn kinds(self) -> &'static [FaultKind] {
        match self {
            ControlPlane::Ours => &FaultKind::ALL,
            ControlPlane::Upstream => &FaultKind::UPSTREAM,
        }
    }
}

/// What to run and for how long.
#[derive(Debug, Clone)]
pub struct ChaosSpec {
    /// Whose control plane is put through the chaos.
    pub control_plane: ControlPlane,
    /// Our daemon as built; the soak runs a copy of it, which upgrades replace.
    pub daemon: PathBuf,
    /// Our kresctl, for `reload` and `upgrade` as an operator runs them.
    pub kresctl: PathBuf,
    /// The bytes after which a build label is written into a copy of the daemon
    /// (`kres_daemon::BUILD_LABEL_MARKER`), so each upgrade runs a binary of another version.
    pub build_label_marker: Vec<u8>,
    /// Workers at the start, in the configuration file, and at the end.
    pub workers: u32,
    /// Scaling alternates between `workers` and this.
    pub scaled_workers: u32,
    /// Queries per second of the load.
    pub rate: u32,
    /// Faults are started until this much time has passed (and every kind was drawn once).
    pub duration: Duration,
    /// The rhythm of the schedule: one fault starts per period (or as soon as the previous
    /// one's effect was seen, when that took longer).
    pub period: Duration,
    /// Seeds the schedule and the choices inside faults (which worker, which body).
    pub seed: u64,
    /// How long any one effect may take to show (generous: a loaded machine, a debug build,
    /// the supervisor's restart backoff).
    pub effect_timeout: Duration,
}

/// One kind of fault or change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    KillWorker,
    KillManager,
    KillCacheGc,
    PanicManagerTask,
    ScaleWorkers,
    PolicyChange,
    RefusedChange,
    LiveChange,
    ReloadByKresctl,
    ReloadBySighup,
    /// kill -9 of the manager process and at once SIGHUP to the root: the reload is carried
    /// out by the next manager.
    ReloadWhileManagerAway,
    Upgrade,
    HostileBody,
    ConnectionBurst,
}

impl FaultKind {
    pub const ALL: [FaultKind; 14] = [
        FaultKind::KillWorker,
        FaultKind::KillManager,
        FaultKind::KillCacheGc,
        FaultKind::PanicManagerTask,
        FaultKind::ScaleWorkers,
        FaultKind::PolicyChange,
        FaultKind::RefusedChange,
        FaultKind::LiveChange,
        FaultKind::ReloadByKresctl,
        FaultKind::ReloadBySighup,
        FaultKind::ReloadWhileManagerAway,
        FaultKind::Upgrade,
        FaultKind::HostileBody,
        FaultKind::ConnectionBurst,
    ];

    /// What upstream's manager is put through: worker and manager kills, reloads, scaling.
    pub const UPSTREAM: [FaultKind; 4] = [
        FaultKind::KillWorker,
        FaultKind::KillManager,
        FaultKind::ReloadByKresctl,
        FaultKind::ScaleWorkers,
    ];

    /// Whether the workers run on as the same processes through this fault: everything that
    /// befalls the control plane alone, and changes the workers take while running.
    pub fn keeps_workers(self) -> bool {
        !matches!(
            self,
            FaultKind::KillWorker
                | FaultKind::ScaleWorkers
                | FaultKind::ReloadByKresctl
                | FaultKind::ReloadBySighup
                | FaultKind::ReloadWhileManagerAway
        )
    }

    pub fn label(self) -> &'static str {
        match self {
            FaultKind::KillWorker => "kill -9 worker",
            FaultKind::KillManager => "kill -9 kres-manager",
            FaultKind::KillCacheGc => "kill -9 kres-cache-gc",
            FaultKind::PanicManagerTask => "manager-task panic",
            FaultKind::ScaleWorkers => "scale workers",
            FaultKind::PolicyChange => "policy change",
            FaultKind::RefusedChange => "refused change",
            FaultKind::LiveChange => "live change (logging.level)",
            FaultKind::ReloadByKresctl => "reload (kresctl, POST /reload)",
            FaultKind::ReloadBySighup => "reload (SIGHUP)",
            FaultKind::ReloadWhileManagerAway => "reload (SIGHUP) as the manager dies",
            FaultKind::Upgrade => "upgrade (kresctl)",
            FaultKind::HostileBody => "hostile body",
            FaultKind::ConnectionBurst => "connection burst",
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// The seeded schedule: faults in rounds, each round every kind once in a shuffled order, so
/// a short run still meets every kind and a seed replays the same sequence.
#[derive(Debug, Clone)]
pub struct Schedule {
    rng: SplitMix64,
    /// The kinds every round holds.
    kinds: Vec<FaultKind>,
    /// What is left of the current round.
    round: Vec<FaultKind>,
}

impl Schedule {
    pub fn new(seed: u64, kinds: &[FaultKind]) -> Schedule {
        Schedule {
            rng: SplitMix64(seed),
            kinds: kinds.to_vec(),
            round: Vec::new(),
        }
    }

    /// Whether the current round is complete (every kind drawn as often as any other).
    pub fn at_round_end(&self) -> bool {
        self.round.is_empty()
    }

    /// The next fault.
    pub fn next_kind(&mut self) -> FaultKind {
        if self.round.is_empty() {
            self.round = self.kinds.clone();
            // Fisher-Yates, drawn from the end.
            for i in (1..self.round.len()).rev() {
                let j = self.rng.below(i as u64 + 1) as usize;
                self.round.swap(i, j);
            }
        }
        self.round.pop().unwrap_or(FaultKind::KillWorker)
    }

    /// A number below `n` for choices inside a fault.
    pub fn choose(&mut self, n: u64) -> u64 {
        self.rng.below(n)
    }
}

/// SplitMix64: small, seedable, good enough to shuffle a schedule.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

/// Resident memory and open descriptors of one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Footprint {
    /// Anonymous memory (heap and stacks): a leak per fault grows it. Program text is left
    /// out: the root gives it back at READY and the code a fault runs maps it again.
    pub anon_kib: u64,
    /// Entries of /proc/PID/fd: a descriptor kept per fault grows it.
    pub descriptors: u64,
    /// What each descriptor refers to (`socket:[…]`, `anon_inode:…`, a path), sorted: the
    /// ones more after than before say what was kept.
    pub targets: Vec<String>,
}

impl Footprint {
    pub fn of(pid: i32) -> Result<Footprint> {
        let anon_kib =
            procs::anonymous_kib(pid).with_context(|| format!("anonymous memory of {pid}"))?;
        let mut targets: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .with_context(|| format!("descriptors of {pid}"))?
            .flatten()
            .map(|e| {
                std::fs::read_link(e.path())
                    .map(|t| t.display().to_string())
                    .unwrap_or_else(|_| "?".into())
            })
            .collect();
        targets.sort();
        Ok(Footprint {
            anon_kib,
            descriptors: targets.len() as u64,
            targets,
        })
    }

    /// Kinds of descriptor `self` holds more of than `before` (sockets and pipes by kind, not
    /// inode), with how many more.
    pub fn more_than(&self, before: &Footprint) -> Vec<(String, usize)> {
        let kind = |t: &String| match t.split_once(':') {
            Some((k, _)) if !t.starts_with('/') => format!("{k}:"),
            _ => t.clone(),
        };
        let mut kinds: Vec<String> = self.targets.iter().map(kind).collect();
        kinds.sort();
        kinds.dedup();
        kinds
            .into_iter()
            .filter_map(|k| {
                let count = |f: &Footprint| f.targets.iter().filter(|t| kind(t) == k).count();
                let (now, then) = (count(self), count(before));
                (now > then).then(|| (k, now - then))
            })
            .collect()
    }
}

impl fmt::Display for Footprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "anonymous memory {} KiB, {} descriptors",
            self.anon_kib, self.descriptors
        )
    }
}

/// The root's footprint may grow by this much between before the first fault and after the
/// last (allocator caches, a log line buffered); a leak per fault exceeds it over a soak.
pub const ROOT_RSS_SLACK_KIB: u64 = 4 * 1024;
pub const ROOT_DESCRIPTOR_SLACK: u64 = 4;

/// One fault as it was carried out.
#[derive(Debug, Clone)]
pub struct FaultRecord {
    /// What was done: losses are charged by it.
    pub kind: FaultKind,
    /// When it began and when its effect was seen, from the start of the load.
    pub began: Duration,
    pub ended: Duration,
    /// What it did, for the log of the run.
    pub detail: String,
}

/// One pass criterion and how the run fared.
#[derive(Debug, Clone)]
pub struct Criterion {
    /// What is promised.
    pub name: &'static str,
    /// Whether the run kept the promise.
    pub passed: bool,
    /// The figures it was judged on (or why it failed), for the report.
    pub detail: String,
}

/// Everything a run measured.
#[derive(Debug)]
pub struct ChaosReport {
    /// Whose run this is.
    pub control_plane: ControlPlane,
    /// Replays the run's schedule.
    pub seed: u64,
    /// Every fault whose effect was seen, in order.
    pub faults: Vec<FaultRecord>,
    /// The load's queries sent, answered and lost.
    pub load: LoadReport,
    /// How many lost queries are allowed.
    pub worker_kills: u64,
    /// The root's footprint before the first fault, under load.
    pub root_before: Footprint,
    /// The same after the last fault, back at the starting worker count; `None` when the
    /// root was gone.
    pub root_after: Option<Footprint>,
    /// PASS or FAIL, each with its figures.
    pub criteria: Vec<Criterion>,
}

impl ChaosReport {
    pub fn passed(&self) -> bool {
        self.criteria.iter().all(|c| c.passed)
    }

    /// How many faults of each kind ran.
    pub fn counts(&self) -> Vec<(FaultKind, usize)> {
        self.control_plane
            .kinds()
            .iter()
            .map(|k| (*k, self.faults.iter().filter(|f| f.kind == *k).count()))
            .collect()
    }

    /// Lost queries by the kind of fault each is charged to ([`charge`]); `None` for losses
    /// before the first fault.
    pub fn losses_by_kind(&self) -> Vec<(Option<FaultKind>, u64)> {
        let mut out: Vec<(Option<FaultKind>, u64)> = Vec::new();
        for at in &self.load.lost_at {
            let kind = charge(&self.faults, *at);
            match out.iter_mut().find(|(k, _)| *k == kind) {
                Some((_, n)) => *n += 1,
                None => out.push((kind, 1)),
            }
        }
        out
    }
}

impl fmt::Display for ChaosReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whose = match self.control_plane {
            ControlPlane::Ours => "ours",
            ControlPlane::Upstream => "upstream's manager",
        };
        writeln!(f, "chaos soak of {whose}, seed {}", self.seed)?;
        writeln!(f, "faults by kind ({} in all):", self.faults.len())?;
        for (kind, n) in self.counts() {
            writeln!(f, "  {:<38} {n:>5}", kind.label())?;
        }
        writeln!(f, "load: {}", self.load)?;
        for (kind, n) in self.losses_by_kind() {
            let kind = kind.map_or("before any fault", FaultKind::label);
            writeln!(f, "  lost during {kind}: {n}")?;
        }
        writeln!(f, "root before the first fault: {}", self.root_before)?;
        match &self.root_after {
            Some(after) => writeln!(f, "root after the last fault:   {after}")?,
            None => writeln!(f, "root after the last fault:   gone")?,
        }
        for c in &self.criteria {
            let verdict = if c.passed { "PASS" } else { "FAIL" };
            writeln!(f, "{verdict} {}: {}", c.name, c.detail)?;
        }
        Ok(())
    }
}

/// What the driver last had accepted: the document the API must serve, and the name DNS must
/// answer from its policy.
#[derive(Debug, Clone)]
struct Accepted {
    /// What `GET /v1/config` must serve.
    document: Value,
    /// A name of its `local-data` and the address DNS must answer for it.
    policy: (String, Ipv4Addr),
}

/// The resolver under chaos and what the driver knows of it.
struct Soak<'a> {
    /// What the run was asked to be.
    spec: &'a ChaosSpec,
    /// The run's directory (configuration, rundir, cache, the daemon's copy).
    dir: TestDir,
    /// The copy of the daemon that runs, replaced by each upgrade.
    program: PathBuf,
    /// The daemon's process tree (its pid is the root's).
    launched: Launched,
    /// Stands in for systemd for the whole run, so the daemon's READY, RELOADING and STATUS
    /// reach a service manager as in production; reloads and upgrades are seen there.
    notify: NotifyListener,
    /// Host path of the API socket.
    api: PathBuf,
    /// Host path of the configuration file (JSON), rewritten before reloads.
    config_file: PathBuf,
    /// The DNS port on 127.0.0.1, in every configuration file written.
    port: u16,
    /// What comes next, and the choices inside faults.
    schedule: Schedule,
    /// What the running configuration must be.
    accepted: Accepted,
    /// Bumped by every change that names something new (policy names, file versions,
    /// upgrade labels), so no two changes look alike.
    generation: u32,
    /// Each allows one lost query.
    worker_kills: u64,
}

/// Run the soak; a fault whose effect did not show in time ends it, and fails the criterion
/// "every fault's effect was seen". An error when the soak could not begin.
pub fn run(spec: &ChaosSpec) -> Result<ChaosReport> {
    let seed = spec.seed;
    run_soak(spec).with_context(|| format!("chaos soak with seed {seed}"))
}

fn run_soak(spec: &ChaosSpec) -> Result<ChaosReport> {
    let bed = Bed::get()?;
    let mut soak = Soak::start(bed, spec)?;
    let total = spec.duration + Duration::from_secs(600);
    let mut load_spec = LoadSpec::new(soak.dns(), spec.rate, LOAD_NAME);
    load_spec.max_duration = total;
    load_spec.max_queries = u64::from(spec.rate) * total.as_secs();
    // Query ids stay unique per source socket.
    load_spec.sockets = (load_spec.max_queries / 65536 + 1).max(16) as usize;
    let load = Load::start(load_spec)?;
    ensure!(
        load.wait_answers(u64::from(spec.rate), spec.effect_timeout),
        "the load is not answered"
    );
    let root = soak.launched.pid();
    let root_before = Footprint::of(root)?;
    eprintln!(
        "chaos: seed {}, {} workers (scaled to {}), {} queries/s, {:?}; root {root}: {root_before}",
        spec.seed, spec.workers, spec.scaled_workers, spec.rate, spec.duration
    );
    let (faults, mut failure) = soak.follow_schedule(&load);
    if failure.is_none() {
        // Back to the starting worker count, so the root's descriptors compare like for like.
        let settled = soak.scale_to(spec.workers).and_then(|()| {
            ensure!(
                load.wait_answers(u64::from(spec.rate), spec.effect_timeout),
                "the load is not answered at the end"
            );
            Ok(())
        });
        failure = settled.err().map(|e| format!("settling at the end: {e:#}"));
    }
    let root_after = Footprint::of(root).ok();
    let load = load.stop();
    let mut criteria = vec![
        Criterion {
            name: "every fault's effect was seen",
            passed: failure.is_none(),
            detail: failure.unwrap_or_else(|| format!("{} faults", faults.len())),
        },
        lost_only_to_worker_kills(&load, &faults, soak.worker_kills),
        Criterion {
            name: "the root is the same process throughout",
            passed: soak.launched.tree().iter().any(|p| p.pid == root),
            detail: format!("pid {root}"),
        },
    ];
    criteria.extend(root_flat(&root_before, root_after.as_ref()));
    criteria.push(soak.no_zombies());
    criteria.push(soak.accepted_configuration_runs());
    criteria.push(soak.accepted_policy_answers());
    criteria.push(soak.stop());
    Ok(ChaosReport {
        control_plane: spec.control_plane,
        seed: spec.seed,
        faults,
        load,
        worker_kills: soak.worker_kills,
        root_before,
        root_after,
        criteria,
    })
}

/// The root's memory and descriptors after the last fault against before the first, within
/// their slack; `after` is `None` when the root was gone.
fn root_flat(before: &Footprint, after: Option<&Footprint>) -> [Criterion; 2] {
    let shown = |v: Option<u64>| v.map_or("gone".to_owned(), |v| v.to_string());
    let anon = after.map(|a| a.anon_kib);
    let descriptors = after.map(|a| a.descriptors);
    let more = after.map(|a| a.more_than(before)).unwrap_or_default();
    [
        Criterion {
            name: "root memory flat",
            passed: anon.is_some_and(|a| a <= before.anon_kib + ROOT_RSS_SLACK_KIB),
            detail: format!(
                "anonymous: {} KiB before, {} KiB after (slack {ROOT_RSS_SLACK_KIB} KiB)",
                before.anon_kib,
                shown(anon)
            ),
        },
        Criterion {
            name: "root descriptors flat",
            passed: descriptors.is_some_and(|a| a <= before.descriptors + ROOT_DESCRIPTOR_SLACK),
            detail: format!(
                "{} before, {} after (slack {ROOT_DESCRIPTOR_SLACK}); more of: {more:?}",
                before.descriptors,
                shown(descriptors)
            ),
        },
    ]
}

/// No query lost beyond one per killed worker: each loss is charged to the fault under way
/// when it was sent ([`charge`]); those charged to worker kills may number as many as workers
/// were killed (a worker may die holding a query it had read), any other is one too many.
fn lost_only_to_worker_kills(load: &LoadReport, faults: &[FaultRecord], kills: u64) -> Criterion {
    let in_kills = load
        .lost_at
        .iter()
        .filter(|at| charge(faults, **at) == Some(FaultKind::KillWorker))
        .count() as u64;
    let elsewhere = load.lost - in_kills;
    Criterion {
        name: "queries lost at most one per killed worker",
        passed: in_kills <= kills && elsewhere == 0,
        detail: format!(
            "{} lost of {} sent: {in_kills} in {kills} worker kills, {elsewhere} elsewhere",
            load.lost, load.sent
        ),
    }
}

/// The kind of fault a query sent at `at` (from the start of the load) and lost is charged
/// to: the last one begun by then, with a second of grace (a query sent just before a kill
/// can be lost in it); `None` before the first fault.
fn charge(faults: &[FaultRecord], at: Duration) -> Option<FaultKind> {
    faults
        .iter()
        .rev()
        .find(|f| f.began <= at + Duration::from_secs(1))
        .map(|f| f.kind)
}

/// The configuration file's document: `workers`, the load's name and `extra_name` in
/// `local-data`, notice logging.
fn file_document(dir: &TestDir, port: u16, workers: u32, extra: &(String, Ipv4Addr)) -> Value {
    let run = dir.bed("run").display().to_string();
    json!({
        "workers": workers,
        "rundir": run,
        "network": {"listen": [{"interface": format!("127.0.0.1@{port}")}]},
        "cache": {
            "storage": dir.bed("cache").display().to_string(),
            "size-max": "10M",
            "garbage-collector": {"enable": true, "interval": "1s"},
        },
        "management": {"unix-socket": format!("{run}/kres-api.sock")},
        "logging": {"level": "notice"},
        "local-data": {"records": records(extra)},
    })
}

/// `local-data.records`: the load's name and `extra`.
fn records((name, address): &(String, Ipv4Addr)) -> String {
    format!("{LOAD_NAME} 300 A {LOAD_ADDRESS}\n{name} 300 A {address}\n")
}

impl<'a> Soak<'a> {
    /// Start the control plane on a fresh configuration file (JSON, the starting worker
    /// count, the GC every second) and wait for its `READY=1`.
    fn start(bed: &'static Bed, spec: &'a ChaosSpec) -> Result<Soak<'a>> {
        ensure!(spec.workers >= 1 && spec.scaled_workers >= 1, "no workers");
        let dir = bed.test_dir("chaos")?;
        std::fs::create_dir_all(dir.host("run"))?;
        std::fs::create_dir_all(dir.host("cache"))?;
        std::fs::create_dir_all(dir.host("bin"))?;
        let program = dir.host("bin/knot-resolver");
        install(&spec.daemon, &spec.build_label_marker, &program, "")?;
        let port = crate::free_port()?;
        let policy = (
            "file-0.chaos.test.".to_owned(),
            Ipv4Addr::new(192, 0, 2, 200),
        );
        let document = file_document(&dir, port, spec.workers, &policy);
        let config_file = dir.host("config.json");
        crate::write(&config_file, &serde_json::to_string_pretty(&document)?)?;
        let mut notify = NotifyListener::bind(&dir.host("notify.sock"))?;
        let args = [os("-c"), os(dir.bed("config.json"))];
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let notify_path = os(dir.bed("notify.sock"));
        let env = [
            ("NOTIFY_SOCKET", notify_path.as_os_str()),
            // `kres_daemon::daemon::FAULT_INJECTION_VAR`: `POST /debug/panic-manager`.
            ("KRES_FAULT_INJECTION", std::ffi::OsStr::new("1")),
        ];
        let launched = match spec.control_plane {
            ControlPlane::Ours => bed.launch(&program, &args, &env)?,
            ControlPlane::Upstream => {
                bed.launch_installed(Path::new("/usr/bin/knot-resolver"), &args, &env[..1])?
            }
        };
        if let Err(e) = notify.wait_for("READY=1", spec.effect_timeout) {
            bail!("{e:#}\ndaemon output:\n{}", launched.output.text());
        }
        let api = dir.host("run/kres-api.sock");
        Ok(Soak {
            spec,
            dir,
            program,
            launched,
            notify,
            api,
            config_file,
            port,
            schedule: Schedule::new(spec.seed, spec.control_plane.kinds()),
            accepted: Accepted { document, policy },
            generation: 0,
            worker_kills: 0,
        })
    }

    /// Faults one per period, drawn from the schedule, until the duration is over and the
    /// round complete (at least one round); each waits for its effect and for DNS answers.
    /// The faults carried out, and the first whose effect was not seen, which ends the run.
    fn follow_schedule(&mut self, load: &Load) -> (Vec<FaultRecord>, Option<String>) {
        let spec = self.spec;
        let mut faults = Vec::new();
        let start = Instant::now();
        let mut slot = 0u32;
        while start.elapsed() < spec.duration || faults.is_empty() || !self.schedule.at_round_end()
        {
            // The rhythm of the schedule: the next slot, or at once when the previous fault's
            // effect took longer than a period.
            let due = start + spec.period * slot;
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let slots_passed = start.elapsed().as_millis() / spec.period.as_millis().max(1);
            slot = slot.max(u32::try_from(slots_passed).unwrap_or(u32::MAX)) + 1;
            let kind = self.schedule.next_kind();
            let began = load.elapsed();
            let inflicted = self.inflict(kind).and_then(|detail| {
                ensure!(
                    load.wait_answers(u64::from(spec.rate / 10).max(1), spec.effect_timeout),
                    "the load is not answered after {kind}"
                );
                Ok(detail)
            });
            let number = faults.len() + 1;
            let detail = match inflicted {
                Ok(detail) => detail,
                Err(e) => {
                    return (
                        faults,
                        Some(format!("fault {number} ({kind}) at {began:.1?}: {e:#}")),
                    )
                }
            };
            let ended = load.elapsed();
            eprintln!(
                "chaos: #{number:<3} {began:>8.1?} {kind:<36} {detail} ({:.1?})",
                ended - began
            );
            faults.push(FaultRecord {
                kind,
                began,
                ended,
                detail,
            });
        }
        (faults, None)
    }

    /// Where the load and the policy checks ask.
    fn dns(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Carry out one fault and wait for its effect; what it did. The workers must still be
    /// the same processes afterwards when the fault [keeps them](FaultKind::keeps_workers).
    fn inflict(&mut self, kind: FaultKind) -> Result<String> {
        // Read as systemd does, so the daemon never waits on a full queue of ours.
        self.notify.drain()?;
        let workers = self.pids("kresd");
        let detail = self.carry_out(kind)?;
        self.notify.drain()?;
        if kind.keeps_workers() && self.spec.control_plane == ControlPlane::Ours {
            let now = self.pids("kresd");
            ensure!(
                now == workers,
                "{kind} replaced workers: {workers:?} before, {now:?} after\n{}",
                self.output_tail()
            );
        }
        Ok(detail)
    }

    fn carry_out(&mut self, kind: FaultKind) -> Result<String> {
        match kind {
            FaultKind::KillWorker => self.kill_worker(),
            FaultKind::KillManager => self.kill_replaced(ProcessRole::Manager),
            FaultKind::KillCacheGc => self.kill_replaced(ProcessRole::CacheGc),
            FaultKind::PanicManagerTask => self.panic_manager_task(),
            FaultKind::ScaleWorkers => {
                let now = self.accepted.document["workers"].as_u64().unwrap_or(0);
                let to = if now == u64::from(self.spec.workers) {
                    self.spec.scaled_workers
                } else {
                    self.spec.workers
                };
                self.scale_to(to)?;
                Ok(format!("{now} -> {to} workers"))
            }
            FaultKind::PolicyChange => self.policy_change(),
            FaultKind::RefusedChange => self.refused_change(),
            FaultKind::LiveChange => self.live_change(),
            FaultKind::ReloadByKresctl => self.reload(ReloadBy::Kresctl),
            FaultKind::ReloadBySighup => self.reload(ReloadBy::Sighup),
            FaultKind::ReloadWhileManagerAway => self.reload(ReloadBy::SighupWhileManagerAway),
            FaultKind::Upgrade => self.upgrade(),
            FaultKind::HostileBody => self.hostile_body(),
            FaultKind::ConnectionBurst => self.connection_burst(),
        }
    }

    /// Wait for `what` until the effect timeout, polling `check`.
    fn until<T>(&self, what: &str, check: impl FnMut() -> Result<Option<T>>) -> Result<T> {
        crate::wait_for(what, self.spec.effect_timeout, check)
            .with_context(|| format!("daemon output:\n{}", self.output_tail()))
    }

    /// The last lines of the daemon's output, for failure messages.
    fn output_tail(&self) -> String {
        let text = self.launched.output.text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    /// Pids of the tree's processes named `comm` (kresd: the workers only), sorted.
    fn pids(&self, comm: &str) -> Vec<i32> {
        let mut v: Vec<i32> = self
            .launched
            .descendants()
            .into_iter()
            .filter(|p| p.comm == comm)
            .filter(|p| comm != "kresd" || is_worker(p.pid))
            .map(|p| p.pid)
            .collect();
        v.sort_unstable();
        v
    }

    fn kill_worker(&mut self) -> Result<String> {
        let workers = self.until("a worker to kill", || {
            let w = self.pids("kresd");
            Ok((!w.is_empty()).then_some(w))
        })?;
        let victim = workers[self.schedule.choose(workers.len() as u64) as usize];
        kill(Pid::from_raw(victim), Signal::SIGKILL)?;
        self.worker_kills += 1;
        let now = self.until("the killed worker replaced", || {
            let now = self.pids("kresd");
            Ok((now.len() == workers.len() && !now.contains(&victim)).then_some(now))
        })?;
        Ok(format!("killed {victim}, workers now {now:?}"))
    }

    /// Pids of the manager process (ours: `kres-manager`; upstream's: Python running
    /// `knot_resolver.manager`) or of the cache GC.
    fn role_pids(&self, role: ProcessRole) -> Vec<i32> {
        match (role, self.spec.control_plane) {
            (ProcessRole::CacheGc, _) => self.pids("kres-cache-gc"),
            (ProcessRole::Manager, ControlPlane::Ours) => self.pids("kres-manager"),
            (ProcessRole::Manager, ControlPlane::Upstream) => self
                .pids("python3")
                .into_iter()
                .filter(|p| {
                    std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| {
                        c.split(|b| *b == 0)
                            .any(|arg| arg == b"knot_resolver.manager")
                    })
                })
                .collect(),
        }
    }

    /// Kill the one process of `role`; wait for its successor (and, for the manager, for its
    /// API to answer).
    fn kill_replaced(&mut self, role: ProcessRole) -> Result<String> {
        let old = self.until(&format!("a {role:?} to kill"), || {
            Ok(self.role_pids(role).first().copied())
        })?;
        kill(Pid::from_raw(old), Signal::SIGKILL)?;
        let new = self.until(&format!("{role:?} replaced"), || {
            Ok(self.role_pids(role).into_iter().find(|p| *p != old))
        })?;
        if role == ProcessRole::Manager {
            self.until("the new manager's API", || Ok(self.get_config().ok()))?;
        }
        Ok(format!("killed {old}, now {new}"))
    }

    fn panic_manager_task(&mut self) -> Result<String> {
        let adopted = "manager restarted; adopted the running workers";
        let before = self.launched.output.count(adopted);
        let resp = self.http("POST", "/debug/panic-manager", b"")?;
        ensure!(resp.status == 200, "panic: {} {}", resp.status, resp.text());
        self.launched
            .output
            .wait_for_count(adopted, before + 1, self.spec.effect_timeout)?;
        self.until("the API after the panic", || Ok(self.get_config().ok()))?;
        Ok("the task restarted and adopted the workers".into())
    }

    /// `PUT /v1/config/workers`; wait until that many workers run.
    fn scale_to(&mut self, workers: u32) -> Result<()> {
        if self.accepted.document["workers"] == json!(workers) {
            return Ok(());
        }
        self.accept("/workers", json!(workers))?;
        self.until(&format!("{workers} workers"), || {
            Ok((self.pids("kresd").len() == workers as usize).then_some(()))
        })
    }

    /// New `local-data` records (the load's name kept); the new name answered.
    fn policy_change(&mut self) -> Result<String> {
        self.generation += 1;
        let g = self.generation;
        let policy = (
            format!("policy-{g}.chaos.test."),
            Ipv4Addr::new(192, 0, 2, (g % 200 + 2) as u8),
        );
        self.accept("/local-data/records", json!(records(&policy)))?;
        self.accepted.policy = policy.clone();
        self.until("the new policy answered", || Ok(self.policy_answered()))?;
        Ok(format!("{} answers {}", policy.0, policy.1))
    }

    /// An invalid value: 400, and the ETag (the running configuration) unchanged.
    fn refused_change(&mut self) -> Result<String> {
        let before = self.etag()?;
        let invalid = [json!("many"), json!(-1), json!({"workers": 2})];
        let body = &invalid[self.schedule.choose(invalid.len() as u64) as usize];
        let resp = self.http("PUT", "/v1/config/workers", body.to_string().as_bytes())?;
        ensure!(
            resp.status == 400,
            "refused: {} {}",
            resp.status,
            resp.text()
        );
        ensure!(
            self.etag()? == before,
            "a refused change changed the configuration"
        );
        Ok(format!("workers = {body}: 400"))
    }

    /// `logging.level` notice <-> info, applied to the running workers.
    fn live_change(&mut self) -> Result<String> {
        let now = self.accepted.document["logging"]["level"].clone();
        let to = if now == json!("info") {
            "notice"
        } else {
            "info"
        };
        self.accept("/logging/level", json!(to))?;
        Ok(format!("logging.level {now} -> {to}"))
    }

    /// A new configuration file (another `local-data` name, the starting worker count), read
    /// again by `kresctl reload` or SIGHUP; the file runs afterwards.
    fn reload(&mut self, by: ReloadBy) -> Result<String> {
        self.generation += 1;
        let g = self.generation;
        let policy = (
            format!("file-{g}.chaos.test."),
            Ipv4Addr::new(192, 0, 2, (g % 50 + 202) as u8),
        );
        let document = file_document(&self.dir, self.port, self.spec.workers, &policy);
        crate::write(&self.config_file, &serde_json::to_string_pretty(&document)?)?;
        let seen = self.notifications_so_far()?;
        match by {
            ReloadBy::Kresctl if self.spec.control_plane == ControlPlane::Upstream => {
                let resp = self.http("POST", "/reload", b"")?;
                ensure!(
                    resp.status == 200,
                    "reload: {} {}",
                    resp.status,
                    resp.text()
                );
            }
            ReloadBy::Kresctl => {
                let out = self.kresctl(&["reload"])?;
                crate::succeeded("kresctl reload", &out)?;
            }
            ReloadBy::Sighup => {
                let mut events = http::EventStream::open(&self.api, "/events", &[])?;
                ensure!(events.status == 200, "GET /events: {}", events.status);
                self.launched.signal(Signal::SIGHUP)?;
                let deadline = Instant::now() + self.spec.effect_timeout;
                loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let message = events.next(left)?.context("the event stream ended")?;
                    let event: Value = serde_json::from_str(&message.data)?;
                    let kind = event["kind"].as_str().unwrap_or_default();
                    if event["cause"] == "reload" {
                        ensure!(kind == "config-applied", "the reload: {event}");
                        break;
                    }
                }
            }
            ReloadBy::SighupWhileManagerAway => {
                let manager = self.until("a manager to kill", || {
                    Ok(self.role_pids(ProcessRole::Manager).first().copied())
                })?;
                kill(Pid::from_raw(manager), Signal::SIGKILL)?;
                self.launched.signal(Signal::SIGHUP)?;
                self.until("the manager replaced", || {
                    Ok(self
                        .role_pids(ProcessRole::Manager)
                        .into_iter()
                        .find(|p| *p != manager))
                })?;
            }
        }
        if self.spec.control_plane == ControlPlane::Ours {
            self.reloading_then_ready(seen)?;
        }
        self.accepted = Accepted { document, policy };
        self.until("the file's configuration running", || {
            Ok((self.get_config().ok().as_ref() == Some(&self.accepted.document)).then_some(()))
        })?;
        self.until("the file's policy answered", || Ok(self.policy_answered()))?;
        let workers = self.spec.workers as usize;
        self.until("the file's workers", || {
            Ok((self.pids("kresd").len() == workers).then_some(()))
        })?;
        Ok(format!("{} answers", self.accepted.policy.0))
    }

    /// How many notifications the service manager has had, every one sent so far read.
    fn notifications_so_far(&mut self) -> Result<usize> {
        self.notify.drain()?;
        Ok(self.notify.received.len())
    }

    /// The service manager was told `RELOADING=1` and then `READY=1` after the first `seen`
    /// notifications, as systemd must be for a reload or an upgrade.
    fn reloading_then_ready(&mut self, seen: usize) -> Result<()> {
        let timeout = self.spec.effect_timeout;
        self.notify.wait_for_after(seen, "RELOADING=1", timeout)?;
        let reloading = self
            .notify
            .received
            .iter()
            .skip(seen)
            .position(|m| m.lines().any(|l| l == "RELOADING=1"))
            .map_or(seen, |i| seen + i + 1);
        self.notify.wait_for_after(reloading, "READY=1", timeout)?;
        Ok(())
    }

    /// A copy of the daemon of another version installed over the running one, `kresctl
    /// upgrade`; the new version answers, the root's pid stays.
    fn upgrade(&mut self) -> Result<String> {
        self.generation += 1;
        let label = format!("chaos-{}", self.generation);
        install(
            &self.spec.daemon,
            &self.spec.build_label_marker,
            &self.program,
            &label,
        )?;
        let seen = self.notifications_so_far()?;
        let out = self.kresctl(&["upgrade"])?;
        let text = crate::succeeded("kresctl upgrade", &out)?;
        self.reloading_then_ready(seen)?;
        let suffix = format!("+{label}");
        self.until("the new version running", || {
            let Ok(resp) = self.http("GET", "/upgrade", b"") else {
                return Ok(None);
            };
            let status: Value = serde_json::from_slice(&resp.body).unwrap_or_default();
            Ok(status["version"]
                .as_str()
                .is_some_and(|v| v.ends_with(&suffix))
                .then_some(()))
        })?;
        Ok(text.trim().to_owned())
    }

    /// A 10 MiB body, a document nested 300 levels, or a YAML alias bomb: refused, nothing
    /// changes.
    fn hostile_body(&mut self) -> Result<String> {
        let before = self.etag()?;
        let (what, content_type, body) = match self.schedule.choose(3) {
            0 => (
                "a 10 MiB body",
                "application/json",
                format!("\"{}\"", "x".repeat(10 << 20)).into_bytes(),
            ),
            1 => (
                "a document nested 300 levels",
                "application/json",
                format!("{}{}", "{\"a\":".repeat(300), "}".repeat(300)).into_bytes(),
            ),
            _ => {
                let mut bomb = format!("script: &s {}\nl:\n", "x".repeat(10_000));
                for _ in 0..50_000 {
                    bomb.push_str("  - *s\n");
                }
                ("a YAML alias bomb", "application/yaml", bomb.into_bytes())
            }
        };
        let resp = http::request(
            &self.api,
            "PUT",
            "/v1/config/lua",
            &[("Content-Type", content_type)],
            &body,
        )?;
        ensure!(
            resp.status == 400 || resp.status == 413,
            "{what}: {} {}",
            resp.status,
            resp.text()
        );
        ensure!(self.etag()? == before, "{what} changed the configuration");
        Ok(format!("{what}: {}", resp.status))
    }

    /// Idle connections on the API socket; an admin is answered while they are held, and
    /// after they are closed.
    fn connection_burst(&mut self) -> Result<String> {
        let mut held = Vec::with_capacity(BURST_CONNECTIONS);
        for _ in 0..BURST_CONNECTIONS {
            match UnixStream::connect(&self.api) {
                Ok(s) => held.push(s),
                // The backlog is full: the burst is as large as the kernel lets it be.
                Err(_) => break,
            }
        }
        let opened = held.len();
        self.get_config()
            .context("the API while the burst is held")?;
        drop(held);
        self.get_config().context("the API after the burst")?;
        Ok(format!("{opened} idle connections held, then closed"))
    }

    /// A change through the API (`PUT /v1/config{pointer}`), which must be accepted; the
    /// driver's accepted document follows it.
    fn accept(&mut self, pointer: &str, value: Value) -> Result<()> {
        let resp = self.http(
            "PUT",
            &format!("/v1/config{pointer}"),
            value.to_string().as_bytes(),
        )?;
        ensure!(
            resp.status == 200,
            "PUT {pointer} = {value}: {} {}\n{}",
            resp.status,
            resp.text(),
            self.output_tail()
        );
        let slot = self
            .accepted
            .document
            .pointer_mut(pointer)
            .with_context(|| format!("{pointer} in the accepted document"))?;
        *slot = value;
        Ok(())
    }

    fn http(&self, method: &str, path: &str, body: &[u8]) -> Result<http::HttpResponse> {
        http::request(
            &self.api,
            method,
            path,
            &[("Content-Type", "application/json")],
            body,
        )
    }

    fn get_config(&self) -> Result<Value> {
        let resp = self.http("GET", "/v1/config", b"")?;
        ensure!(resp.status == 200, "GET /v1/config: {}", resp.status);
        Ok(serde_json::from_slice(&resp.body)?)
    }

    fn etag(&self) -> Result<String> {
        let resp = self.http("GET", "/v1/config", b"")?;
        ensure!(resp.status == 200, "GET /v1/config: {}", resp.status);
        Ok(resp.header("etag").context("no ETag")?.to_owned())
    }

    fn kresctl(&self, args: &[&str]) -> Result<std::process::Output> {
        Command::new(&self.spec.kresctl)
            .arg("-s")
            .arg(&self.api)
            .args(args)
            .output()
            .context("running kresctl")
    }

    /// `Some` when DNS answers the accepted policy's name with its address.
    fn policy_answered(&self) -> Option<()> {
        let (name, address) = &self.accepted.policy;
        dns::query_udp(self.dns(), name, dns::TYPE_A, Duration::from_secs(2))
            .ok()
            .filter(|r| r.a() == [*address])
            .map(|_| ())
    }

    /// Zombies whose parent is a process of the tree; a zombie may stand for the moment
    /// between an exit and its reaping, so they are waited out until the effect timeout.
    fn no_zombies(&self) -> Criterion {
        let zombies = || {
            let tree: Vec<i32> = self.launched.tree().iter().map(|p| p.pid).collect();
            all_processes()
                .into_iter()
                .filter(|p| p.state == 'Z' && tree.contains(&p.ppid))
                .collect::<Vec<_>>()
        };
        let left = crate::wait_for("no zombie", self.spec.effect_timeout, || {
            Ok(zombies().is_empty().then_some(()))
        });
        Criterion {
            name: "no zombie in the tree",
            passed: left.is_ok(),
            detail: match left {
                Ok(()) => "none".into(),
                Err(_) => format!("{:?}", zombies()),
            },
        }
    }

    fn accepted_configuration_runs(&self) -> Criterion {
        let running = self.get_config();
        let passed = running.as_ref().is_ok_and(|r| *r == self.accepted.document);
        Criterion {
            name: "GET /v1/config is the last accepted configuration",
            passed,
            detail: match running {
                Ok(_) if passed => format!(
                    "workers {}, logging.level {}",
                    self.accepted.document["workers"], self.accepted.document["logging"]["level"]
                ),
                Ok(r) => format!("running {r}\naccepted {}", self.accepted.document),
                Err(e) => format!("{e:#}"),
            },
        }
    }

    fn accepted_policy_answers(&self) -> Criterion {
        let (name, address) = &self.accepted.policy;
        let answered = crate::wait_for("the last policy", self.spec.effect_timeout, || {
            Ok(self.policy_answered())
        });
        Criterion {
            name: "DNS answers the last policy",
            passed: answered.is_ok(),
            detail: format!("{name} A {address}"),
        }
    }

    /// SIGINT: exit 0 and no process of the tree left.
    fn stop(&mut self) -> Criterion {
        let stopped = (|| -> Result<String> {
            self.launched.signal(Signal::SIGINT)?;
            let status = self.launched.wait(self.spec.effect_timeout)?;
            let left = self.launched.tree();
            ensure!(status.code() == Some(0), "{status}\n{}", self.output_tail());
            ensure!(left.is_empty(), "left running: {left:?}");
            Ok(format!("{status}, no process left"))
        })();
        Criterion {
            name: "a clean stop (SIGINT)",
            passed: stopped.is_ok(),
            detail: stopped.unwrap_or_else(|e| format!("{e:#}")),
        }
    }
}

/// A process of the control plane that a fault kills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProcessRole {
    Manager,
    CacheGc,
}

/// How a reload is asked.
#[derive(Debug, Clone, Copy)]
enum ReloadBy {
    Kresctl,
    Sighup,
    /// SIGHUP right after a kill -9 of the manager process.
    SighupWhileManagerAway,
}

/// Whether the kresd `pid` is a worker (not the policy-loader or a canary): its `-c` file is
/// `kresd<N>.conf`.
fn is_worker(pid: i32) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    cmdline.split(|b| *b == 0).any(|arg| {
        let name = arg.rsplit(|b| *b == b'/').next().unwrap_or(arg);
        name.strip_prefix(b"kresd")
            .and_then(|rest| rest.strip_suffix(b".conf"))
            .is_some_and(|n| !n.is_empty() && n.iter().all(u8::is_ascii_digit))
    })
}

/// Every process of the machine, zombies included.
fn all_processes() -> Vec<procs::ProcInfo> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter_map(procs::info)
        .collect()
}

/// A copy of `daemon` at `to` with build label `label` (empty: as built), put in place at once
/// (a rename), as a package manager does.
pub fn install(daemon: &Path, marker: &[u8], to: &Path, label: &str) -> Result<()> {
    const LABEL_ROOM: usize = 40;
    ensure!(label.len() < LABEL_ROOM, "label too long: {label}");
    let mut bytes = std::fs::read(daemon).with_context(|| format!("{}", daemon.display()))?;
    let at = bytes
        .windows(marker.len())
        .position(|w| w == marker)
        .context("the build label's area in the binary")?
        + marker.len();
    let area = bytes
        .get_mut(at..at + LABEL_ROOM)
        .context("the build label's area is cut short")?;
    for (i, b) in label
        .bytes()
        .chain(std::iter::repeat(0))
        .take(LABEL_ROOM)
        .enumerate()
    {
        area[i] = b;
    }
    write_executable(to, &bytes)
}

/// Put `bytes` at `to` as an executable, replacing what is there at once (rename), as a
/// package manager does. The file that will run is written by a `cp` of its own, never through
/// a descriptor of this process: a child another thread forks meanwhile would hold that
/// descriptor until its exec, and running the file then fails with "Text file busy".
pub fn write_executable(to: &Path, bytes: &[u8]) -> Result<()> {
    let source = to.with_extension("bytes");
    let tmp = to.with_extension("new");
    std::fs::write(&source, bytes)?;
    let copied = std::process::Command::new("cp")
        .arg(&source)
        .arg(&tmp)
        .status()
        .context("cp")?;
    ensure!(copied.success(), "cp {source:?} {tmp:?}: {copied}");
    std::fs::remove_file(&source)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))?;
    std::fs::rename(&tmp, to)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(kind: FaultKind, began_ms: u64) -> FaultRecord {
        FaultRecord {
            kind,
            began: Duration::from_millis(began_ms),
            ended: Duration::from_millis(began_ms + 100),
            detail: String::new(),
        }
    }

    fn lost_at(ms: &[u64]) -> LoadReport {
        LoadReport {
            lost: ms.len() as u64,
            sent: 10_000,
            lost_at: ms.iter().map(|m| Duration::from_millis(*m)).collect(),
            ..LoadReport::default()
        }
    }

    #[test]
    fn the_descriptors_kept_are_named_by_kind() {
        let footprint = |targets: &[&str]| Footprint {
            anon_kib: 0,
            descriptors: targets.len() as u64,
            targets: targets.iter().map(|t| t.to_string()).collect(),
        };
        let before = footprint(&["/dev/null", "pipe:[1]", "socket:[7]", "socket:[8]"]);
        let after = footprint(&[
            "/dev/null",
            "/memfd:config (deleted)",
            "pipe:[2]",
            "socket:[9]",
            "socket:[10]",
            "socket:[11]",
        ]);
        assert_eq!(
            after.more_than(&before),
            [
                ("/memfd:config (deleted)".to_owned(), 1),
                ("socket:".to_owned(), 1)
            ]
        );
        assert!(before.more_than(&before).is_empty());
    }

    #[test]
    fn losses_are_allowed_only_within_worker_kills_as_many_as_workers_killed() {
        let faults = [
            fault(FaultKind::KillWorker, 2000),
            fault(FaultKind::ScaleWorkers, 4000),
            fault(FaultKind::KillWorker, 6000),
        ];
        // One query sent just before each kill, lost in it.
        assert!(lost_only_to_worker_kills(&lost_at(&[1900, 5990]), &faults, 2).passed);
        // Two in one kill and none in the other: still one per kill in all.
        assert!(lost_only_to_worker_kills(&lost_at(&[2001, 2002]), &faults, 2).passed);
        // Three in two kills.
        assert!(!lost_only_to_worker_kills(&lost_at(&[2001, 2002, 6001]), &faults, 2).passed);
        // One while scaling: no kill allows it.
        assert!(!lost_only_to_worker_kills(&lost_at(&[4500]), &faults, 2).passed);
        // One before any fault.
        assert!(!lost_only_to_worker_kills(&lost_at(&[100]), &faults, 2).passed);
    }

    #[test]
    fn a_seed_replays_its_schedule_and_every_round_holds_every_kind() {
        let draw = |seed| {
            let mut s = Schedule::new(seed, &FaultKind::ALL);
            (0..FaultKind::ALL.len() * 3)
                .map(|_| s.next_kind())
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        for round in draw(7).chunks(FaultKind::ALL.len()) {
            let mut kinds = round.to_vec();
            kinds.sort();
            assert_eq!(kinds, FaultKind::ALL.to_vec());
        }
    }
}
