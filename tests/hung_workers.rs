//! Hung workers on real kresd: a worker stopped with SIGSTOP keeps its pid and its sockets,
//! but stops answering its control socket; with `--worker-hang-timeout` it is killed and
//! restarted, the reason is in `/processes`, the log and `/events`, and DNS is answered
//! meanwhile by the other worker.

mod common;

use std::time::{Duration, Instant};

use common::{Setup, START_TIMEOUT};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use testbed::dns;

const RECORDS: &str = "local-data:\n  addresses:\n    hung.test: 192.0.2.80\n";

/// An answer for hung.test, trying again from new source ports (a query that the kernel
/// gave the stopped worker's socket waits there).
fn answered(r: &common::Resolver) -> bool {
    (0..10).any(|_| {
        dns::query_udp(
            r.dns(),
            "hung.test.",
            dns::TYPE_A,
            Duration::from_millis(500),
        )
        .is_ok_and(|a| a.a() == vec![std::net::Ipv4Addr::new(192, 0, 2, 80)])
    })
}

#[test]
fn a_stopped_worker_is_killed_and_replaced() {
    let setup = Setup::new("hung-worker")
        .workers(2)
        .extra(RECORDS)
        .arg("--worker-hang-timeout=2");
    let r = common::start(&setup).expect("start");
    let mut events = testbed::http::EventStream::open(&r.api, "/events", &[]).expect("events");
    assert!(answered(&r));
    let before = r.pids_named("kresd");
    assert_eq!(before.len(), 2, "{before:?}");
    let stopped = before[0];
    kill(Pid::from_raw(stopped), Signal::SIGSTOP).expect("SIGSTOP");
    let stopped_at = Instant::now();
    assert!(answered(&r), "answered while a worker is stopped");

    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let now = r.pids_named("kresd");
        if now.len() == 2 && !now.contains(&stopped) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stopped worker was not replaced: {now:?}\n{}",
            r.launched.output.text()
        );
        let _ = r
            .launched
            .output
            .wait_for("hung", Duration::from_millis(200));
    }
    eprintln!(
        "stopped worker replaced {:?} after SIGSTOP",
        stopped_at.elapsed()
    );
    assert!(answered(&r), "answered after the replacement");
    let log = r.launched.output.text();
    assert!(
        log.contains("hung: no answer on its control socket"),
        "{log}"
    );

    // The reason is in the process table of the worker that was killed.
    let out = r.kresctl(&["processes", "--json"]).expect("kresctl");
    assert!(out.status.success(), "{out:?}");
    let table: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let reasons: Vec<&str> = table
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|p| p["kill_reason"].as_str())
        .collect();
    assert_eq!(reasons.len(), 1, "{table:#}");
    assert!(reasons[0].contains("hung"), "{reasons:?}");
    // The other worker was never touched.
    assert!(r.pids_named("kresd").contains(&before[1]));

    // Followers of /events saw the hang with its reason, then the exit by SIGKILL.
    let hung = loop {
        let message = events
            .next(START_TIMEOUT)
            .expect("an event")
            .expect("not ended");
        let data: Value = serde_json::from_str(&message.data).expect("JSON");
        if data["kind"] == "process-hung" {
            break data;
        }
    };
    assert_eq!(hung["pid"], stopped, "{hung}");
    assert!(
        hung["reason"].as_str().is_some_and(|r| r.contains("hung")),
        "{hung}"
    );
    let exited = loop {
        let message = events
            .next(START_TIMEOUT)
            .expect("an event")
            .expect("not ended");
        let data: Value = serde_json::from_str(&message.data).expect("JSON");
        if data["kind"] == "process-exited" {
            break data;
        }
    };
    assert_eq!(exited["pid"], stopped, "{exited}");
    assert_eq!(exited["status"]["signaled"]["signal"], 9, "{exited}");
    r.stop();
}
