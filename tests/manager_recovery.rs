//! The manager runs as a supervised task: when it panics, the daemon restarts it, the new
//! incarnation adopts the running workers, and DNS service is never interrupted. A crash loop
//! of any length backs off and never stops the workers.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Resolver, Setup, DNS_TIMEOUT, START_TIMEOUT, STOP_TIMEOUT};
use nix::sys::signal::Signal;
use serde_json::{json, Value};

#[test]
fn manager_panic_keeps_workers_serving_and_adopts_them() {
    let setup = Setup::new("manager-panic")
        .workers(2)
        .env(kres_daemon::daemon::FAULT_INJECTION_VAR, "1")
        .extra("local-data:\n  records: |\n    alive.test. 300 A 192.0.2.9\n");
    let mut r = common::start(&setup).expect("resolver starts");
    let workers_before = r.pids_named("kresd");
    assert_eq!(workers_before.len(), 2);

    // Ask continuously while the manager dies and comes back.
    let asker = common::Asker::start(&r, "alive.test.");

    let resp = r
        .http("POST", "/debug/panic-manager", b"")
        .expect("API answers");
    assert_eq!(resp.status, 200, "{}", resp.text());
    r.launched
        .output
        .wait_for("task panicked (1 failures within", START_TIMEOUT)
        .expect("panic seen");
    let line = r
        .launched
        .output
        .wait_for(
            "manager restarted; adopted the running workers",
            START_TIMEOUT,
        )
        .expect("new incarnation adopts");
    assert!(line.contains("adopted=2"), "{line}");

    // The new incarnation takes commands: a second panic is handled the same way.
    let resp = r
        .http("POST", "/debug/panic-manager", b"")
        .expect("API answers");
    assert_eq!(resp.status, 200, "{}", resp.text());
    r.launched
        .output
        .wait_for("incarnation=2", START_TIMEOUT)
        .expect("second restart");

    let (answered, failed) = asker.finish();
    assert_eq!(failed, 0, "queries failed during manager restarts");
    assert!(answered > 0);

    // Same workers, never restarted, and the API still lists them.
    assert_eq!(r.pids_named("kresd"), workers_before);
    let out = r.kresctl(&["pids", "kresd"]).expect("kresctl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut listed: Vec<i32> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    listed.sort_unstable();
    assert_eq!(listed, workers_before);

    r.launched.signal(Signal::SIGINT).expect("signal");
    let status = r.launched.wait(STOP_TIMEOUT).expect("exit");
    assert_eq!(status.code(), Some(0), "{}", r.launched.output.text());
    assert!(r.launched.tree().is_empty());
}

#[test]
fn fault_injection_is_off_by_default() {
    let mut r = common::start(&Setup::new("no-fault-injection")).expect("resolver starts");
    let resp = r
        .http("POST", "/debug/panic-manager", b"")
        .expect("API answers");
    assert_eq!(resp.status, 404);
    r.launched.signal(Signal::SIGINT).expect("signal");
    assert_eq!(r.launched.wait(STOP_TIMEOUT).expect("exit").code(), Some(0));
}

/// Asks for one name every `PACE` on its own thread, counting the queries sent and those
/// lost (no answer within the client's timeout, or an empty one).
struct PacedAsker {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU32>,
    lost: Arc<AtomicU32>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The pace of [`PacedAsker`]: a client asking about 20 times a second.
const PACE: Duration = Duration::from_millis(50);

impl PacedAsker {
    fn start(r: &Resolver, name: &'static str) -> PacedAsker {
        let stop = Arc::new(AtomicBool::new(false));
        let (sent, lost) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let server = r.dns();
        let thread = {
            let (stop, sent, lost) = (stop.clone(), sent.clone(), lost.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let asked = Instant::now();
                    sent.fetch_add(1, Ordering::SeqCst);
                    match testbed::dns::query_udp(server, name, testbed::dns::TYPE_A, DNS_TIMEOUT) {
                        Ok(resp) if !resp.a().is_empty() => {}
                        _ => {
                            lost.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    std::thread::sleep(PACE.saturating_sub(asked.elapsed()));
                }
            })
        };
        PacedAsker {
            stop,
            sent,
            lost,
            thread: Some(thread),
        }
    }

    /// Stop asking; (sent, lost).
    fn finish(mut self) -> (u32, u32) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("asker thread");
        }
        (
            self.sent.load(Ordering::SeqCst),
            self.lost.load(Ordering::SeqCst),
        )
    }
}

/// The manager's entry of `GET /processes`.
fn manager_entry(r: &Resolver) -> Value {
    let resp = r.http("GET", "/processes", b"").expect("GET /processes");
    assert_eq!(resp.status, 200, "{}", resp.text());
    let list: Vec<Value> = serde_json::from_slice(&resp.body).expect("JSON");
    list.into_iter()
        .find(|p| p["name"] == "manager")
        .expect("a manager entry")
}

/// Twelve panics of the manager task 1.5 s apart, far more than any threshold of giving up:
/// the workers answer throughout, the task backs off (a panic asked while it waits is
/// refused with 503), the log counts the failures truthfully, systemd is told, and once the
/// last backoff is over the API carries out a change.
#[test]
fn a_crash_loop_of_the_manager_task_never_stops_the_workers() {
    const PANICS: usize = 12;
    let setup = Setup::new("manager-crash-loop")
        .workers(2)
        .env(kres_daemon::daemon::FAULT_INJECTION_VAR, "1")
        .extra("local-data:\n  records: |\n    alive.test. 300 A 192.0.2.9\n");
    let mut r = common::start(&setup).expect("resolver starts");
    let workers_before = r.pids_named("kresd");
    assert_eq!(workers_before.len(), 2);
    let asker = PacedAsker::start(&r, "alive.test.");

    let mut accepted = 0u32;
    let mut refused = 0u32;
    let mut last_panic = Instant::now();
    for i in 0..PANICS {
        if i > 0 {
            // The rhythm under test, not an ordering of events.
            std::thread::sleep(Duration::from_millis(1500));
        }
        let resp = r
            .http("POST", "/debug/panic-manager", b"")
            .unwrap_or_else(|e| {
                panic!(
                    "panic {i}: the API is gone ({e}); output:\n{}",
                    r.launched.output.text()
                )
            });
        match resp.status {
            200 => {
                accepted += 1;
                last_panic = Instant::now();
            }
            // The task waits in its backoff: nothing runs that could panic.
            503 => refused += 1,
            other => panic!("panic {i}: {other} {}", resp.text()),
        }
    }
    assert!(
        r.launched.tree().len() > 1,
        "the resolver still runs: {}",
        r.launched.output.text()
    );

    // Back: the task runs again (no next attempt pending) and a change goes through.
    let mut last = Value::Null;
    let entry = testbed::wait_for("the manager task back", Duration::from_secs(60), || {
        last = manager_entry(&r);
        let failures = &last["failures"];
        let back =
            failures["task_failures_total"] == accepted && failures["next_attempt"].is_null();
        Ok(back.then(|| last.clone()))
    })
    .unwrap_or_else(|e| panic!("{e}: {last}"));
    let body = json!("alive.test. 300 A 192.0.2.10\n").to_string();
    let resp = r
        .http("PUT", "/v1/config/local-data/records", body.as_bytes())
        .unwrap_or_else(|e| panic!("PUT: {e}; output:\n{}", r.launched.output.text()));
    assert_eq!(resp.status, 200, "{}", resp.text());
    let api_back = last_panic.elapsed();
    assert_eq!(r.a_records("alive.test."), vec!["192.0.2.10"]);
    let (sent, lost) = asker.finish();
    eprintln!(
        "{PANICS} manager-task panics asked 1.5 s apart: {accepted} carried out, {refused} refused \
         during the backoff; DNS: {sent} queries sent every {} ms, {lost} lost; a change \
         carried out {:.1} s after the last panic",
        PACE.as_millis(),
        api_back.as_secs_f64()
    );
    eprintln!("manager entry: {entry}");
    assert_eq!(lost, 0, "queries lost during the crash loop");
    assert!(
        accepted >= 5,
        "more panics than the old limit of five carried out: {accepted}"
    );
    let failures = &entry["failures"];
    assert_eq!(failures["task_failures"], accepted, "{entry}");
    assert_eq!(failures["last_failure"], "manager task panicked", "{entry}");

    // Counted truthfully in the log, and told to systemd.
    let out = r.launched.output.text();
    assert!(!out.contains("in a row"), "{out}");
    assert!(
        out.contains(&format!("({accepted} failures within")),
        "the log counts every failure: {out}"
    );
    let status = r
        .notify
        .wait_for_prefix("STATUS=Manager task restarting after", START_TIMEOUT)
        .expect("STATUS upward");
    assert!(status.ends_with("workers serving"), "{status}");

    // The same workers all along; kresctl answers.
    assert_eq!(r.pids_named("kresd"), workers_before);
    let out = r.kresctl(&["pids", "kresd"]).expect("kresctl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    r.stop();
}

/// Twelve SIGKILLs of the manager process 1.5 s apart (each while one runs; a moment with
/// none, the root waiting in its backoff, is skipped): the workers answer throughout, the
/// root counts every failure in its log, in STATUS and on the manager's `/processes` entry,
/// and the next incarnation serves the API and carries out a change.
#[test]
fn a_crash_loop_of_the_manager_process_never_stops_the_workers() {
    const ROUNDS: usize = 12;
    let setup = Setup::new("manager-process-crash-loop")
        .workers(2)
        .extra("local-data:\n  records: |\n    alive.test. 300 A 192.0.2.9\n");
    let mut r = common::start(&setup).expect("resolver starts");
    let workers_before = r.pids_named("kresd");
    let asker = PacedAsker::start(&r, "alive.test.");

    let mut killed = 0u32;
    let mut away = 0u32;
    let mut last_kill = Instant::now();
    for i in 0..ROUNDS {
        if i > 0 {
            // The rhythm under test, not an ordering of events.
            std::thread::sleep(Duration::from_millis(1500));
        }
        // Read as systemd would: every incarnation says READY=1 again.
        r.notify.drain().expect("notifications");
        match r.pids_named("kres-manager")[..] {
            [pid] => {
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL)
                    .expect("kill");
                killed += 1;
                last_kill = Instant::now();
                // Seen by the root before the next round.
                r.launched
                    .output
                    .wait_for_count("the manager process ended", killed as usize, START_TIMEOUT)
                    .expect("the root saw the exit");
            }
            _ => away += 1,
        }
    }
    r.launched
        .output
        .wait_for_count(
            "serving the API again",
            killed as usize,
            Duration::from_secs(90),
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", r.launched.output.text()));
    let body = json!("alive.test. 300 A 192.0.2.10\n").to_string();
    let resp = r
        .http("PUT", "/v1/config/local-data/records", body.as_bytes())
        .expect("the API answers");
    assert_eq!(resp.status, 200, "{}", resp.text());
    let api_back = last_kill.elapsed();
    assert_eq!(r.a_records("alive.test."), vec!["192.0.2.10"]);
    let (sent, lost) = asker.finish();
    let entry = manager_entry(&r);
    eprintln!(
        "{ROUNDS} rounds 1.5 s apart: manager process killed {killed} times ({away} rounds found \
         it away); DNS: {sent} queries sent every {} ms, {lost} lost; a change carried out \
         {:.1} s after the last kill",
        PACE.as_millis(),
        api_back.as_secs_f64()
    );
    eprintln!("manager entry: {entry}");
    assert_eq!(lost, 0, "queries lost during the crash loop");
    assert!(killed >= 5, "{killed} kills");
    assert_eq!(entry["failures"]["process_failures"], killed, "{entry}");
    let out = r.launched.output.text();
    assert!(
        out.contains(&format!("the manager process failed {killed} times within")),
        "the log counts every failure: {out}"
    );
    let status = r
        .notify
        .wait_for_prefix(
            &format!("STATUS=Manager restarting after {killed} failures"),
            START_TIMEOUT,
        )
        .expect("STATUS upward");
    assert!(status.ends_with("workers serving"), "{status}");
    assert_eq!(r.pids_named("kresd"), workers_before);
    r.stop();
}

/// A kill of the manager process shows: `/processes` (and `kresctl processes`) count the
/// manager's restart and show its death by SIGKILL, and a `kresctl events` that was running
/// resumes by itself, from its last id, with the new manager's events.
#[test]
fn a_killed_manager_is_counted_and_followers_resume() {
    use std::io::BufRead;
    let r = common::start(&Setup::new("manager-kill-shown")).expect("resolver starts");
    let mut follower = std::process::Command::new(common::KRESCTL)
        .arg("-s")
        .arg(&r.api)
        .arg("events")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kresctl events");
    let (tx, lines) = std::sync::mpsc::channel();
    let stdout = follower.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut printed = Vec::new();
    let mut wait_line = |what: &str| {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = lines
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("no line with {what} ({e}): {printed:#?}"));
            printed.push(line.clone());
            if line.contains(what) {
                return line;
            }
        }
    };
    // The follower is connected once it prints what a reload does.
    let out = r.kresctl(&["reload"]).expect("kresctl reload");
    assert!(out.status.success(), "{out:?}");
    wait_line("config-applied");

    let [manager] = r.pids_named("kres-manager")[..] else {
        panic!("one manager process: {:?}", r.pids_named("kres-manager"));
    };
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(manager), Signal::SIGKILL).expect("kill");
    r.launched
        .output
        .wait_for("serving the API again", START_TIMEOUT)
        .expect("a new manager process");

    // The follower resumed: told what it missed, then the new manager's events.
    wait_line("events-missed");
    wait_line("manager-started");
    assert!(
        follower.try_wait().expect("try_wait").is_none(),
        "kresctl events ended: {printed:#?}"
    );

    // The new manager process knows kresd's version (its predecessor's, kept by the root).
    r.launched
        .output
        .wait_for_count("driving kresd", 2, START_TIMEOUT)
        .expect("the successor's start-up line");
    let greeting: Value =
        serde_json::from_slice(&r.http("GET", "/", b"").expect("GET /").body).expect("JSON");
    assert!(greeting["kresd_version"].is_string(), "{greeting}");

    let entry = manager_entry(&r);
    assert_eq!(entry["restarts"], 1, "{entry}");
    assert_eq!(entry["last_exit"]["signaled"]["signal"], 9, "{entry}");
    let table = r.kresctl(&["processes"]).expect("kresctl processes");
    let text = String::from_utf8_lossy(&table.stdout);
    let row = text
        .lines()
        .find(|l| l.starts_with("manager "))
        .unwrap_or_else(|| panic!("no manager row:\n{text}"));
    let columns: Vec<&str> = row.split_whitespace().collect();
    assert!(
        columns.ends_with(&["1", "signal", "9"]),
        "restarts 1, last exit signal 9: {row}"
    );

    r.stop();
    let status = testbed::wait_for(
        "kresctl events to end with the resolver",
        STOP_TIMEOUT,
        || Ok(follower.try_wait()?),
    )
    .expect("kresctl events outlives the resolver");
    assert!(status.success(), "{status:?}: {printed:#?}");
}
