//! Graceful stop on real kresd, as load balancers, Kubernetes and anycast need it: with
//! `--drain-period`, SIGTERM (or `kresctl drain`) first turns readiness off (`/readyz` 503,
//! `kresctl health --ready` fails) while liveness stays on and DNS keeps being answered; the
//! resolver stops when the period is over, or at once on a second signal.

mod common;

use std::time::Instant;

use common::{Resolver, Setup, DNS_TIMEOUT, START_TIMEOUT, STOP_TIMEOUT};
use nix::sys::signal::Signal;
use testbed::dns;

const RECORDS: &str = "local-data:\n  addresses:\n    drain.test: 192.0.2.70\n";

/// `kresctl health [--ready]`: whether it succeeded, and what it printed.
fn health(r: &Resolver, ready: bool) -> (bool, String) {
    let mut args = vec!["health"];
    if ready {
        args.push("--ready");
    }
    let out = r.kresctl(&args).expect("kresctl runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

fn answers(r: &Resolver) -> bool {
    dns::query_udp(r.dns(), "drain.test.", dns::TYPE_A, DNS_TIMEOUT)
        .is_ok_and(|a| a.a() == vec![std::net::Ipv4Addr::new(192, 0, 2, 70)])
}

/// Poll `kresctl health --ready` until it fails (bounded).
fn wait_not_ready(r: &Resolver) -> String {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let (ok, text) = health(r, true);
        if !ok {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "still ready: {text}\n{}",
            r.launched.output.text()
        );
        let _ = r
            .launched
            .output
            .wait_for("draining", std::time::Duration::from_millis(100));
    }
}

#[test]
fn sigterm_drains_then_a_second_signal_stops_at_once() {
    // A drain far longer than the test: only the second signal can end it in time.
    let setup = Setup::new("drain-signal")
        .workers(2)
        .extra(RECORDS)
        .arg("--drain-period=3600");
    let mut r = common::start(&setup).expect("start");
    let (ready, text) = health(&r, true);
    assert!(ready, "ready before the drain: {text}");
    assert!(health(&r, false).0, "alive before the drain");
    assert!(answers(&r), "answers before the drain");

    r.launched.signal(Signal::SIGTERM).expect("SIGTERM");
    let text = wait_not_ready(&r);
    assert!(text.contains("draining"), "{text}");
    // Still serving: alive, answering, the workers in place, STOPPING=1 told upward.
    let (alive, text) = health(&r, false);
    assert!(alive, "alive while draining: {text}");
    assert!(answers(&r), "answers while draining");
    assert_eq!(r.pids_named("kresd").len(), 2, "both workers still run");
    r.notify
        .wait_for("STOPPING=1", START_TIMEOUT)
        .expect("STOPPING=1 at the start of the drain");

    r.launched.signal(Signal::SIGTERM).expect("second SIGTERM");
    let status = r.launched.wait(STOP_TIMEOUT).expect("stops at once");
    assert_eq!(status.code(), Some(0), "{}", r.launched.output.text());
    assert!(r.launched.tree().is_empty(), "{:?}", r.launched.tree());
}

#[test]
fn kresctl_drain_answers_through_the_period_then_stops() {
    let setup = Setup::new("drain-kresctl")
        .extra(RECORDS)
        .arg("--drain-period=2");
    let mut r = common::start(&setup).expect("start");
    let out = r.kresctl(&["drain"]).expect("kresctl runs");
    assert!(out.status.success(), "{out:?}");
    let text = wait_not_ready(&r);
    assert!(text.contains("draining"), "{text}");
    assert!(answers(&r), "answers while draining");
    // Ends by itself when the period is over, cleanly.
    let status = r
        .launched
        .wait(STOP_TIMEOUT)
        .expect("stops after the period");
    assert_eq!(status.code(), Some(0), "{}", r.launched.output.text());
    assert!(r.launched.tree().is_empty(), "{:?}", r.launched.tree());
    r.launched
        .output
        .wait_for("drain period over", DNS_TIMEOUT)
        .expect("the end of the drain is logged");
}

#[test]
fn without_a_drain_period_sigterm_stops_at_once_and_kresctl_health_fails_when_nothing_runs() {
    let setup = Setup::new("drain-none").extra(RECORDS);
    let mut r = common::start(&setup).expect("start");
    r.launched.signal(Signal::SIGTERM).expect("SIGTERM");
    let status = r.launched.wait(STOP_TIMEOUT).expect("stops");
    assert_eq!(status.code(), Some(0), "{}", r.launched.output.text());
    let (ok, text) = health(&r, false);
    assert!(!ok, "healthy with no resolver: {text}");
}
