//! The manager runs in its own process, a child of the root: whatever kills or wedges it
//! (SIGKILL, a segmentation fault, an abort, a hang), the root stays up, the workers keep
//! answering with unchanged pids, and the next manager process adopts them with the
//! configuration that was running, on the API socket the root kept open. And nothing of the
//! tree outlives the root, and two resolvers never share a rundir. A manager process asked
//! to stop ends every task it ran before it exits.

mod common;

use common::{Asker, Resolver, Setup, DNS_TIMEOUT, START_TIMEOUT, STOP_TIMEOUT};
use nix::sys::signal::Signal;
use testbed::dns;

/// The manager's name in `/proc/PID/comm`.
const MANAGER: &str = "kres-manager";

fn manager_pid(r: &Resolver) -> i32 {
    let pids = r.pids_named(MANAGER);
    assert_eq!(
        pids.len(),
        1,
        "one manager process: {:?}",
        r.launched.tree()
    );
    pids[0]
}

#[test]
fn a_manager_killed_in_any_way_is_replaced_and_nothing_else_changes() {
    let setup = Setup::new("manager-killed")
        .workers(2)
        .env(kres_daemon::daemon::FAULT_INJECTION_VAR, "1")
        .extra("local-data:\n  records: |\n    alive.test. 300 A 192.0.2.9\n");
    let r = common::start(&setup).expect("resolver starts");
    let root = r.launched.pid();
    let workers = r.pids_named("kresd");
    assert_eq!(workers.len(), 2);
    // A change through the API: the configuration now differs from the file, and a new
    // manager must come back with it, not with the file.
    let resp = r
        .http(
            "PUT",
            "/v1/config/local-data/records",
            br#""alive.test. 300 A 192.0.2.9\nchanged.test. 300 A 192.0.2.10\n""#,
        )
        .expect("API answers");
    assert_eq!(resp.status, 200, "{}", resp.text());
    let before = r.etag();
    let asker = Asker::start(&r, "alive.test.");

    for (n, fault) in ["SIGKILL", "SIGABRT", "overflow", "segfault", "abort"]
        .into_iter()
        .enumerate()
    {
        let victim = manager_pid(&r);
        let pid = nix::unistd::Pid::from_raw(victim);
        match fault {
            "SIGKILL" => nix::sys::signal::kill(pid, Signal::SIGKILL).expect("kill"),
            "SIGABRT" => nix::sys::signal::kill(pid, Signal::SIGABRT).expect("kill"),
            how => {
                // The connection is cut when the process dies mid-request.
                let _ = r.http("POST", &format!("/debug/crash-manager/{how}"), b"");
            }
        }
        let signal = fault;
        r.launched
            .output
            .wait_for_count("serving the API again", n + 1, START_TIMEOUT)
            .unwrap_or_else(|e| panic!("{signal}: {e:#}"));
        let replacement = manager_pid(&r);
        assert_ne!(replacement, victim, "{signal}: a new manager process");
        // The root is the same process, the workers are the same processes.
        assert!(
            r.launched.tree().iter().any(|p| p.pid == root),
            "{signal}: the root is alive"
        );
        assert_eq!(
            r.pids_named("kresd"),
            workers,
            "{signal}: workers unchanged"
        );
        // The API is served again with the configuration that was running.
        assert_eq!(r.etag(), before, "{signal}: configuration intact");
        let resp = dns::query_udp(r.dns(), "changed.test.", dns::TYPE_A, DNS_TIMEOUT)
            .expect("DNS answers");
        assert_eq!(
            resp.a(),
            vec![std::net::Ipv4Addr::new(192, 0, 2, 10)],
            "{signal}"
        );
    }
    // Each death was seen for what it was.
    let log = r.launched.output.text();
    for how in ["SIGKILL", "SIGSEGV", "SIGABRT"] {
        assert!(
            log.contains(&format!("the manager process ended: killed by {how}")),
            "{how} reported:\n{log}"
        );
    }
    assert!(log.contains("has overflowed its stack"), "{log}");
    let (answered, failed) = asker.finish();
    assert_eq!(failed, 0, "queries failed while the manager was replaced");
    assert!(answered > 0);

    // The new manager takes changes, and the old workers run them.
    let out = r
        .kresctl(&["config", "set", "-p", "/workers", "3"])
        .expect("kresctl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(r.pids_named("kresd").len(), 3);
    r.stop();
}

/// A change is answered only once the configuration is kept for the next manager process:
/// one killed right after its answer comes back with the change, however slowly it was kept
/// (the fault injected holds each changed configuration back 2 s before the root keeps it).
#[test]
fn a_manager_killed_right_after_answering_a_change_comes_back_with_it() {
    let setup = Setup::new("manager-killed-after-change")
        .env(kres_daemon::daemon::FAULT_INJECTION_VAR, "slow-keeper")
        .extra("local-data:\n  records: |\n    kept.test. 300 A 192.0.2.9\n");
    let r = common::start(&setup).expect("resolver starts");
    let resp = r
        .http(
            "PUT",
            "/v1/config/local-data/records",
            br#""kept.test. 300 A 192.0.2.10\n""#,
        )
        .expect("API answers");
    assert_eq!(resp.status, 200, "{}", resp.text());
    let before = r.etag();
    let victim = manager_pid(&r);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(victim), Signal::SIGKILL).expect("kill");
    r.launched
        .output
        .wait_for("serving the API again", START_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", r.launched.output.text()));
    assert_ne!(manager_pid(&r), victim, "a new manager process");
    assert_eq!(r.etag(), before, "the change answered is the one kept");
    assert_eq!(r.a_records("kept.test."), vec!["192.0.2.10"]);
}

#[test]
fn a_hung_manager_is_replaced_and_waiting_clients_are_answered() {
    let setup = Setup::new("manager-hung")
        .env(kres_daemon::daemon::MANAGER_HANG_VAR, "2")
        .extra("local-data:\n  records: |\n    alive.test. 300 A 192.0.2.9\n");
    let r = common::start(&setup).expect("resolver starts");
    let workers = r.pids_named("kresd");
    let victim = manager_pid(&r);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(victim), Signal::SIGSTOP).expect("stop");
    // A client that connects now waits in the root's listen backlog and is answered by the
    // next manager: queued, not refused.
    let api = r.api.clone();
    let client = std::thread::spawn(move || {
        testbed::http::request(&api, "GET", "/v1/config", &[], b"").map(|resp| resp.status)
    });
    r.launched
        .output
        .wait_for("answered nothing for 2 s", START_TIMEOUT)
        .expect("the hang is noticed");
    r.launched
        .output
        .wait_for("serving the API again", START_TIMEOUT)
        .expect("a new manager adopts");
    assert_eq!(
        client.join().expect("client thread").expect("answered"),
        200
    );
    assert_ne!(manager_pid(&r), victim);
    assert_eq!(r.pids_named("kresd"), workers);
    let resp = dns::query_udp(r.dns(), "alive.test.", dns::TYPE_A, DNS_TIMEOUT).expect("DNS");
    assert_eq!(resp.a(), vec![std::net::Ipv4Addr::new(192, 0, 2, 9)]);
    r.stop();
}

#[test]
fn nothing_outlives_a_killed_root_and_a_new_resolver_takes_its_place() {
    let setup = Setup::new("root-killed").workers(2);
    let mut r = common::start(&setup).expect("resolver starts");
    assert!(
        r.launched.descendants().len() >= 3,
        "workers and the manager"
    );
    r.launched.signal(Signal::SIGKILL).expect("kill the root");
    r.launched.wait(STOP_TIMEOUT).expect("the root is gone");
    // Every child gets SIGKILL from the kernel when its parent dies.
    testbed::wait_for("no survivor", STOP_TIMEOUT, || {
        Ok(r.launched.tree().is_empty().then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e}: survivors: {:?}", r.launched.tree()));
    // The same rundir and port: the stale pid file does not block, no orphan holds the port.
    let mut again = common::launch_beside(&r, "notify-again.sock").expect("relaunch");
    again
        .notify
        .wait_for("READY=1", START_TIMEOUT)
        .expect("the new resolver starts");
    let resp = dns::query_udp(r.dns(), "localhost.", dns::TYPE_A, DNS_TIMEOUT)
        .expect("the new resolver answers");
    assert_eq!(resp.rcode, 0);
    again.stop();
}

#[test]
fn two_starters_at_the_same_instant_never_both_run() {
    let r = common::launch(&Setup::new("two-starters")).expect("launch");
    let mut other = common::launch_beside(&r, "notify-other.sock").expect("launch again");
    let mut r = r;
    // Exactly one of them runs; the other says why it does not and exits 1.
    const REFUSAL: &str = "another manager is running";
    let first_lost = testbed::wait_for("one of them refused", START_TIMEOUT, || {
        Ok(if r.launched.output.count(REFUSAL) > 0 {
            Some(true)
        } else if other.launched.output.count(REFUSAL) > 0 {
            Some(false)
        } else {
            None
        })
    })
    .unwrap_or_else(|e| {
        panic!(
            "{e}: neither was refused:\n{}\n{}",
            r.launched.output.text(),
            other.launched.output.text()
        )
    });
    if first_lost {
        assert_eq!(r.launched.wait(STOP_TIMEOUT).expect("exit").code(), Some(1));
        other
            .notify
            .wait_for("READY=1", START_TIMEOUT)
            .expect("the other one starts");
        assert_eq!(other.launched.output.count(REFUSAL), 0);
        other.stop();
    } else {
        assert_eq!(
            other.launched.wait(STOP_TIMEOUT).expect("exit").code(),
            Some(1)
        );
        r.notify
            .wait_for("READY=1", START_TIMEOUT)
            .expect("the first one starts");
        assert_eq!(r.launched.output.count(REFUSAL), 0);
        r.stop();
    }
}

/// Whether process `pid` is stopped (`T` in `/proc/PID/stat`).
fn is_stopped(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let after_name = stat.rsplit_once(") ")?.1.to_owned();
            after_name.chars().next()
        })
        == Some('T')
}

/// SIGHUP to the root while the manager process cannot take it (stopped, then replaced as
/// hung): the reload waits for the next incarnation, which carries it out once, for the
/// three signals together. The root counts the failure for `/processes` and tells systemd.
#[test]
fn a_reload_asked_while_the_manager_is_away_is_carried_out_when_it_is_back() {
    let setup = Setup::new("manager-away-reload")
        .env(kres_daemon::daemon::MANAGER_HANG_VAR, "2")
        .extra("local-data:\n  records: |\n    away.test. 300 A 192.0.2.9\n");
    let mut r = common::start(&setup).expect("resolver starts");
    let workers = r.pids_named("kresd");
    let victim = manager_pid(&r);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(victim), Signal::SIGSTOP).expect("stop");
    testbed::wait_for("the manager stopped", START_TIMEOUT, || {
        Ok(is_stopped(victim).then_some(()))
    })
    .expect("stopped");

    let config = std::fs::read_to_string(&r.config).expect("read config");
    std::fs::write(&r.config, config.replace("192.0.2.9", "192.0.2.10")).expect("write");
    // Three signals, each seen by the root before the next (the kernel merges signals still
    // pending).
    for n in 1..=3 {
        r.launched.signal(Signal::SIGHUP).expect("SIGHUP");
        r.launched
            .output
            .wait_for_count("SIGHUP received; the manager reloads", n, START_TIMEOUT)
            .expect("SIGHUP seen by the root");
    }
    r.launched
        .output
        .wait_for("serving the API again", START_TIMEOUT)
        .expect("a new manager process");
    assert_ne!(manager_pid(&r), victim, "the hung manager was replaced");
    testbed::wait_for("the reloaded record", START_TIMEOUT, || {
        Ok((r.a_records("away.test.") == vec!["192.0.2.10"]).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", r.launched.output.text()));

    let log = r.launched.output.text();
    let reloads: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("reload asked of the root"))
        .collect();
    assert_eq!(reloads.len(), 1, "one reload for three signals: {log}");
    assert!(reloads[0].contains("rings=3"), "{}", reloads[0]);
    assert_eq!(r.pids_named("kresd"), workers, "no worker restarted");

    let resp = r.http("GET", "/processes", b"").expect("GET /processes");
    let list: Vec<serde_json::Value> = serde_json::from_slice(&resp.body).expect("JSON");
    let manager = list
        .iter()
        .find(|p| p["name"] == "manager")
        .expect("a manager entry");
    let failures = &manager["failures"];
    assert_eq!(failures["process_failures"], 1, "{manager}");
    assert_eq!(
        failures["last_failure"], "manager process: answered nothing for 2 s",
        "{manager}"
    );
    let status = r
        .notify
        .wait_for_prefix("STATUS=Manager restarting after 1 failures", START_TIMEOUT)
        .expect("STATUS upward");
    assert!(status.ends_with("workers serving"), "{status}");
    r.stop();
}

/// The manager process's stop cancels every task it runs and waits for each (the API's, the
/// file watchdog's, the hang check's, the query log's reader and follower, the RPZ tasks',
/// the event log's followers, the manager task's supervision): all have ended when it exits,
/// none is cut off by the exit.
#[test]
fn a_stopped_manager_process_ends_every_task_it_ran() {
    let setup = Setup::new("manager-tasks-end")
        .arg("--watch-config")
        .arg("--worker-hang-timeout=30")
        .extra("monitoring:\n  query-log:\n    enabled: true\n");
    let mut r = common::start(&setup).expect("resolver starts");
    // The query log's reader runs (its socket bound).
    let status = r
        .http("GET", "/query-log/status", b"")
        .expect("API answers");
    let status: serde_json::Value = serde_json::from_slice(&status.body).expect("JSON");
    assert_eq!(status["enabled"], true, "{status}");
    assert!(status["inactive_reason"].is_null(), "{status}");
    r.launched.signal(Signal::SIGINT).expect("SIGINT");
    let exit = r.launched.wait(STOP_TIMEOUT).expect("the resolver stops");
    let log = r.launched.output.text();
    assert_eq!(exit.code(), Some(0), "{log}");
    assert!(
        log.contains("manager process stopped: all its tasks ended ("),
        "{log}"
    );
    assert!(!log.contains("of its tasks still running"), "{log}");
}
