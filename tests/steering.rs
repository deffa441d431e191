//! Steering of the workers' reuseport groups, on real kresd under load: a crashed worker's
//! share goes to the other worker at once (nothing lost but the query the killed process
//! held, and the crash barely shows in the latency; the same crash without steering is
//! measured for comparison), scaling down loses
//! nothing, and the groups follow each worker's state (a worker in its restart backoff gets
//! no query; both answer again once it is back).

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{Resolver, Setup, DNS_TIMEOUT};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use testbed::dns;
use testbed::load::{Load, LoadReport, LoadSpec};

const RECORDS: &str = "local-data:\n  records: |\n    load.test. 300 A 192.0.2.9\n";

/// Queries per second of every load in this file.
const RATE: u32 = 4000;

/// Bound of every wait for a state of the process table.
const STATE_TIMEOUT: Duration = Duration::from_secs(30);

fn load(server: SocketAddr) -> Load {
    Load::start(LoadSpec::new(server, RATE, "load.test.")).expect("load starts")
}

/// The workers as `/processes/kresd` lists them, by name.
fn workers(r: &Resolver) -> BTreeMap<String, Value> {
    let resp = r
        .http("GET", "/processes/kresd", b"")
        .expect("GET /processes");
    assert_eq!(resp.status, 200, "{}", resp.text());
    let list: Vec<Value> = serde_json::from_slice(&resp.body).expect("JSON");
    list.into_iter()
        .map(|p| (p["name"].as_str().unwrap_or_default().to_owned(), p))
        .collect()
}

/// Wait until `name` is running with a pid other than `old` and, when steered, takes queries
/// again.
fn wait_back(r: &Resolver, name: &str, old: i64) -> i64 {
    let mut last = Value::Null;
    testbed::wait_for(&format!("{name} back"), STATE_TIMEOUT, || {
        last = workers(r)[name].clone();
        let takes = last.get("takes_queries").is_none_or(|t| *t == true);
        let back = last["state"] == "running" && last["pid"].as_i64() != Some(old) && takes;
        Ok(back.then(|| last["pid"].as_i64().expect("pid")))
    })
    .unwrap_or_else(|e| panic!("{e}: {last}"))
}

/// UDP requests each running worker counted (`/metrics/json`).
fn udp_requests(r: &Resolver) -> BTreeMap<String, u64> {
    let resp = r.http("GET", "/metrics/json", b"").expect("metrics");
    assert_eq!(resp.status, 200, "{}", resp.text());
    let json: Value = serde_json::from_slice(&resp.body).expect("JSON");
    json.as_object()
        .expect("object keyed by worker")
        .iter()
        .map(|(k, v)| {
            let name = k.strip_prefix("kresd:").unwrap_or(k).to_owned();
            (name, v["request"]["udp"].as_u64().unwrap_or(0))
        })
        .collect()
}

/// `n` queries one after the other, each from a new source port; every one must be answered.
fn ask(server: SocketAddr, n: usize) {
    for i in 0..n {
        let a = dns::query_udp(server, "load.test.", dns::TYPE_A, DNS_TIMEOUT)
            .unwrap_or_else(|e| panic!("query {i}: {e:#}"));
        assert_eq!(a.a().len(), 1, "query {i}");
    }
}

/// Two workers under load; `kresd1` is SIGKILLed once both have been up longer than the
/// supervisor's stable period (so it is restarted at once) and comes back. Returns the report
/// and when the kill happened, from the start of the load.
fn crash_under_load(setup: Setup) -> (LoadReport, Duration) {
    let r = common::start(&setup.workers(2).extra(RECORDS)).expect("start");
    let load = load(r.dns());
    // Six seconds of answers: the steady state, and longer than the stable period (5 s).
    assert!(
        load.wait_answers(u64::from(RATE) * 6, Duration::from_secs(30)),
        "load answered"
    );
    let old = workers(&r)["kresd1"]["pid"].as_i64().expect("kresd1 runs");
    let killed_at = load.elapsed();
    kill(Pid::from_raw(old as i32), Signal::SIGKILL).expect("kill");
    let new = wait_back(&r, "kresd1", old);
    // It answers again: its counter grows while the load goes on.
    let before = udp_requests(&r);
    assert!(
        load.wait_answers(u64::from(RATE), Duration::from_secs(10)),
        "load answered after the crash"
    );
    let after = udp_requests(&r);
    assert!(
        after.get("kresd1") > before.get("kresd1"),
        "kresd1 (pid {new}) answers again: {before:?} -> {after:?}"
    );
    let report = load.stop();
    let log = r.launched.output.text();
    r.stop();
    if let Some(gap) = restart_gap(&log, "kresd1", old, new) {
        eprintln!("kresd1: exit reaped -> new process spawned in {gap:?}");
    }
    if let Some(up) = start_time(&log, "kresd1", new) {
        eprintln!("kresd1: new process spawned -> READY=1 in {up:?}");
    }
    (report, killed_at)
}

/// The time between the "process spawned" and the "ready" lines of `pid`.
fn start_time(log: &str, name: &str, pid: i64) -> Option<Duration> {
    let at = |what: &str| {
        let needle = format!("{what} name=\"{name}\" pid={pid}");
        log.lines()
            .find(|l| l.contains(&needle))
            .and_then(|l| l.split_whitespace().next())
            .and_then(log_seconds)
    };
    let spawned = at("process spawned")?;
    let ready = at("ready")?;
    Some(Duration::from_secs_f64((ready - spawned).max(0.0)))
}

/// Latency of the steady state and of the window around the kill.
fn print_latency(what: &str, report: &LoadReport, killed_at: Duration) {
    eprintln!("{what}: {report}");
    let steady = report.latency(
        Duration::from_secs(1),
        killed_at - Duration::from_millis(500),
    );
    let crash = report.latency(
        killed_at.saturating_sub(Duration::from_millis(10)),
        killed_at + Duration::from_millis(300),
    );
    eprintln!(
        "{what}: steady state {}",
        steady.map_or("no answers".into(), |p| p.to_string())
    );
    eprintln!(
        "{what}: kill -10 ms .. +300 ms {}",
        crash.map_or("no answers".into(), |p| p.to_string())
    );
}

#[test]
fn a_crashed_workers_share_goes_to_the_other_at_once() {
    let (report, killed_at) = crash_under_load(Setup::new("steer-crash"));
    print_latency("kill -9 of 1 of 2 workers, steered", &report, killed_at);
    assert!(
        report.rate() >= 3000.0,
        "too slow to prove anything: {report}"
    );
    // What the kernel already gave the killed process (a query it was answering) is lost
    // with it, steered or not; its queue is not.
    assert!(report.lost <= 1, "{report}");
}

#[test]
fn without_steering_a_crashed_workers_share_waits_in_its_queue() {
    let (report, killed_at) =
        crash_under_load(Setup::new("steer-off-crash").env("KRES_NO_STEERING", "1"));
    print_latency("kill -9 of 1 of 2 workers, not steered", &report, killed_at);
    assert!(
        report.rate() >= 3000.0,
        "too slow to prove anything: {report}"
    );
    // What the kernel already gave the killed process is lost with it.
    assert!(report.lost <= 1, "{report}");
}

#[test]
fn scaling_down_under_load_loses_nothing() {
    let r =
        common::start(&Setup::new("steer-scale-down").workers(4).extra(RECORDS)).expect("start");
    let load = load(r.dns());
    assert!(
        load.wait_answers(u64::from(RATE), Duration::from_secs(10)),
        "load answered"
    );
    let resp = r
        .http("PUT", "/v1/config/workers", b"1")
        .expect("PUT workers");
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(
        load.wait_answers(u64::from(RATE), Duration::from_secs(10)),
        "load answered after the change"
    );
    let report = load.stop();
    eprintln!("scale 4 -> 1 under load: {report}");
    if let Some(p) = report.latency(Duration::ZERO, report.elapsed) {
        eprintln!("scale 4 -> 1 under load: {p}");
    }
    assert!(
        report.rate() >= 3000.0,
        "too slow to prove anything: {report}"
    );
    assert_eq!(report.lost, 0, "{report}");
    let w = workers(&r);
    assert_eq!(w.keys().collect::<Vec<_>>(), vec!["kresd0"], "{w:?}");
    assert_eq!(w["kresd0"]["takes_queries"], true);
    r.stop();
}

#[test]
fn steering_follows_the_workers_state() {
    let r = common::start(&Setup::new("steer-state").workers(2).extra(RECORDS)).expect("start");
    let w = workers(&r);
    assert_eq!(w["kresd0"]["takes_queries"], true, "{w:?}");
    assert_eq!(w["kresd1"]["takes_queries"], true, "{w:?}");
    // Both answer: each gets a share of queries from many source ports. (The stats module
    // loads on the first scrape; only later queries count.)
    let before = udp_requests(&r);
    ask(r.dns(), 200);
    let after = udp_requests(&r);
    for name in ["kresd0", "kresd1"] {
        assert!(
            after.get(name) > before.get(name),
            "{name}: {before:?} -> {after:?}"
        );
    }

    // Killed twice within a second of its spawn, kresd1 waits in its restart backoff (at least
    // the supervisor's floor of 1 s between spawns). Every query asked meanwhile is answered,
    // and kresd1 was in the same backoff before and after them: none waited in its queue for
    // it to come back, kresd0 took them all.
    let old = w["kresd1"]["pid"].as_i64().expect("pid");
    kill(Pid::from_raw(old as i32), Signal::SIGKILL).expect("kill");
    let second = wait_back(&r, "kresd1", old);
    kill(Pid::from_raw(second as i32), Signal::SIGKILL).expect("kill again");
    let backoff = testbed::wait_for("kresd1 in backoff", STATE_TIMEOUT, || {
        let w = workers(&r);
        Ok((w["kresd1"]["state"] == "backoff").then(|| w["kresd1"].clone()))
    })
    .expect("no backoff");
    assert_eq!(backoff["takes_queries"], false, "{backoff}");
    assert_eq!(workers(&r)["kresd0"]["takes_queries"], true);
    ask(r.dns(), 50);
    let w = workers(&r);
    assert_eq!(
        (
            &w["kresd1"]["state"],
            &w["kresd1"]["since"],
            &w["kresd1"]["restarts"]
        ),
        (&backoff["state"], &backoff["since"], &backoff["restarts"]),
        "kresd1 stayed in its backoff while the queries were answered: {}",
        w["kresd1"]
    );

    // Back: both answer again.
    wait_back(&r, "kresd1", second);
    let before = udp_requests(&r);
    ask(r.dns(), 200);
    let after = udp_requests(&r);
    for name in ["kresd0", "kresd1"] {
        assert!(
            after.get(name) > before.get(name),
            "{name}: {before:?} -> {after:?}"
        );
    }
    r.stop();
}

/// The crash tail: kresd1 is killed under load moments after its spawn (the resolver has just
/// started), its first failure. It is restarted at once, not held back by the floor between
/// spawns (1 s): no snapshot ever shows it in its backoff, and what waited in its socket is
/// answered by the new process (only the batch the killed process had read is lost). Prints
/// how long those queries waited.
#[test]
fn a_first_crash_soon_after_the_spawn_is_restarted_at_once() {
    let r =
        common::start(&Setup::new("steer-crash-tail").workers(2).extra(RECORDS)).expect("start");
    let load = load(r.dns());
    assert!(
        load.wait_answers(u64::from(RATE) / 10, Duration::from_secs(30)),
        "load answered"
    );
    let before = workers(&r);
    let old = before["kresd1"]["pid"].as_i64().expect("kresd1 runs");
    let age = before["kresd1"]["since"].as_f64().map(|since| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        now - since
    });
    let killed_at = load.elapsed();
    kill(Pid::from_raw(old as i32), Signal::SIGKILL).expect("kill");
    // Every table until it is back (each state once in a row): none shows it waiting in a
    // backoff.
    let deadline = Instant::now() + STATE_TIMEOUT;
    let mut states = Vec::new();
    // When a table first shows the killed process gone (no longer running as `old`): from
    // then on nothing sent can be lost with it.
    let mut gone_at = None;
    let new = loop {
        let w = workers(&r);
        let p = &w["kresd1"];
        if gone_at.is_none() && (p["state"] != "running" || p["pid"].as_i64() != Some(old)) {
            gone_at = Some(load.elapsed());
        }
        let state = p["state"].as_str().unwrap_or_default().to_owned();
        if states.last() != Some(&state) {
            states.push(state);
        }
        if p["state"] == "running" && p["pid"].as_i64() != Some(old) {
            break p["pid"].as_i64().expect("pid");
        }
        assert!(Instant::now() < deadline, "kresd1 not back: {p}");
    };
    assert!(
        load.wait_answers(u64::from(RATE), Duration::from_secs(10)),
        "load answered after the crash"
    );
    let report = load.stop();
    let log = r.launched.output.text();
    r.stop();
    eprintln!(
        "kresd1 (ready for {:.0} ms) killed; back as pid {new}; states seen: {states:?}",
        age.unwrap_or(f64::NAN) * 1000.0
    );
    let what = "kill -9 of 1 of 2 workers just after the start";
    eprintln!("{what}: {report}");
    let crash = report.latency(
        killed_at.saturating_sub(Duration::from_millis(10)),
        killed_at + Duration::from_millis(300),
    );
    eprintln!(
        "{what}: kill -10 ms .. +300 ms {}",
        crash.map_or("no answers".into(), |p| p.to_string())
    );
    if let Some(gap) = restart_gap(&log, "kresd1", old, new) {
        eprintln!("kresd1: exit reaped -> new process spawned in {gap:?}");
    }
    if let Some(up) = start_time(&log, "kresd1", new) {
        eprintln!("kresd1: new process spawned -> READY=1 in {up:?}");
    }
    assert!(
        !states.iter().any(|s| s == "backoff"),
        "the first crash was held in a backoff: {states:?}"
    );
    assert!(
        report.rate() >= 3000.0,
        "too slow to prove anything: {report}"
    );
    // Only what the killed process had already read is lost with it (kresd reads a batch of
    // datagrams at a time): every lost query was sent before it was seen gone; what waited in
    // the socket, and everything sent since, was answered.
    let gone_at = gone_at.expect("seen gone before back");
    assert!(
        report.lost_at.iter().all(|&t| t <= gone_at),
        "lost after the process was gone ({gone_at:?}): {:?}; {report}",
        report.lost_at
    );
}

/// The time between the supervisor's "process exited" line of `old` and its "process
/// spawned" line of `new` for `name`, from the daemon's log timestamps.
fn restart_gap(log: &str, name: &str, old: i64, new: i64) -> Option<Duration> {
    let at = |needle: &str| {
        log.lines()
            .find(|l| l.contains(needle) && l.contains(&format!("name=\"{name}\"")))
            .and_then(|l| l.split_whitespace().next())
            .and_then(log_seconds)
    };
    let exited = at(&format!("process exited name=\"{name}\" pid={old}"))?;
    let spawned = at(&format!("process spawned name=\"{name}\" pid={new}"))?;
    Some(Duration::from_secs_f64((spawned - exited).max(0.0)))
}

/// Seconds within the day of an RFC 3339 timestamp such as `2026-11-24T01:34:08.907616Z`.
fn log_seconds(t: &str) -> Option<f64> {
    let time = t.split_once('T')?.1.trim_end_matches('Z');
    let mut parts = time.split(':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    Some(h * 3600.0 + m * 60.0 + s)
}
