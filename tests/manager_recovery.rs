//! The manager runs as a supervised task: when it panics, the daemon restarts it, the new
//! incarnation adopts the running workers, and DNS service is never interrupted.

mod common;

use common::{Setup, START_TIMEOUT, STOP_TIMEOUT};
use nix::sys::signal::Signal;

#[test]
fn manager_panic_keeps_workers_serving_and_adopts_them() {
    let setup = Setup::new("manager-panic")
        .workers(2)
        .env(knot_resolver::daemon::FAULT_INJECTION_VAR, "1")
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
        .wait_for("task panicked; restarting it", START_TIMEOUT)
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
