//! End to end on real kresd 6: start with several workers, READY upward, DNS answers from
//! local data, the API, and a clean stop that leaves no process behind.

mod common;

use std::time::Duration;

use common::{Setup, DNS_TIMEOUT, START_TIMEOUT, STOP_TIMEOUT};
use nix::sys::signal::Signal;
use testbed::dns;

const RECORDS: &str = "local-data:\n  records: |\n    example.test. 300 A 192.0.2.1\n    example.test. 300 AAAA 2001:db8::1\n    www.example.test. 300 CNAME example.test.\n";

fn assert_stops_cleanly(r: &mut common::Resolver, signal: Signal) {
    let before = r.launched.tree();
    assert!(
        !before.is_empty(),
        "the tree should be alive before the stop"
    );
    r.launched.signal(signal).expect("signal the daemon");
    let status = r.launched.wait(STOP_TIMEOUT).expect("daemon exits");
    assert_eq!(
        status.code(),
        Some(0),
        "exit status {status:?}; output:\n{}",
        r.launched.output.text()
    );
    let left = r.launched.tree();
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

#[test]
fn two_workers_answer_local_data_and_stop_on_sigint() {
    let mut r = common::start(&Setup::new("two-workers").workers(2).extra(RECORDS))
        .expect("resolver starts");

    // Exactly the processes we asked for.
    assert_eq!(
        r.children_named("kresd").len(),
        2,
        "two kresd workers: {:?}",
        r.launched.descendants()
    );
    assert_eq!(
        r.children_named("kres-cache-gc").len(),
        1,
        "one garbage collector"
    );

    let a = dns::query_udp(r.dns(), "example.test.", dns::TYPE_A, DNS_TIMEOUT).expect("A answer");
    assert_eq!(a.rcode, dns::RCODE_NOERROR);
    assert_eq!(
        a.a(),
        vec!["192.0.2.1".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    let aaaa = dns::query_tcp(r.dns(), "example.test.", dns::TYPE_AAAA, DNS_TIMEOUT)
        .expect("AAAA over TCP");
    assert_eq!(
        aaaa.aaaa(),
        vec!["2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap()]
    );
    let cname = dns::query_udp(r.dns(), "www.example.test.", dns::TYPE_A, DNS_TIMEOUT)
        .expect("CNAME answer");
    assert!(
        cname
            .answers
            .iter()
            .any(|rec| rec.data == dns::RData::Name("example.test.".into())),
        "{cname:?}"
    );

    // READY carried a status line, and the API serves the config as written.
    assert!(
        r.notify.received.iter().any(|m| m.contains("STATUS=")),
        "{:?}",
        r.notify.received
    );
    let out = r
        .kresctl(&["config", "get", "--json"])
        .expect("kresctl runs");
    assert!(
        out.status.success(),
        "kresctl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cfg: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON config");
    assert_eq!(cfg["workers"], 2);
    assert_eq!(
        cfg["network"]["listen"][0]["interface"],
        format!("127.0.0.1@{}", r.port)
    );

    assert_stops_cleanly(&mut r, Signal::SIGINT);
    r.notify
        .wait_for("STOPPING=1", Duration::from_secs(1))
        .expect("STOPPING=1 sent before exit");
    assert!(!r.api.exists(), "API socket removed");
    assert!(
        !r.dir.host("run/knot-resolver.pid").exists(),
        "rundir lock removed"
    );
}

#[test]
fn sigterm_stops_cleanly_too() {
    let mut r = common::start(&Setup::new("sigterm").extra(RECORDS)).expect("resolver starts");
    dns::query_udp(r.dns(), "example.test.", dns::TYPE_A, DNS_TIMEOUT).expect("answer");
    assert_stops_cleanly(&mut r, Signal::SIGTERM);
}

#[test]
fn kresctl_stop_stops_everything() {
    let mut r = common::start(&Setup::new("kresctl-stop").workers(2)).expect("resolver starts");
    let out = r.kresctl(&["stop"]).expect("kresctl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = r.launched.wait(STOP_TIMEOUT).expect("daemon exits");
    assert_eq!(status.code(), Some(0));
    assert!(
        r.launched.tree().is_empty(),
        "processes left: {:?}",
        r.launched.tree()
    );
}

#[test]
fn a_failing_policy_loader_is_a_clear_startup_error() {
    // Zone-file text that kresd cannot parse makes the policy-loader exit non-zero.
    let setup = Setup::new("bad-records")
        .extra("local-data:\n  records: |\n    this is not a zone file ((\n");
    let mut r = common::launch(&setup).expect("launch");
    let status = r.launched.wait(START_TIMEOUT).expect("daemon exits");
    assert_eq!(
        status.code(),
        Some(1),
        "output:\n{}",
        r.launched.output.text()
    );
    let text = r.launched.output.text();
    assert!(text.contains("policy-loader failed"), "output:\n{text}");
    assert_nothing_started(&r);
}

/// What a failed start leaves: no process of the tree, and no READY sent.
fn assert_nothing_started(r: &common::Resolver) {
    assert!(
        r.launched.tree().is_empty(),
        "processes left: {:?}",
        r.launched.tree()
    );
    assert!(
        !r.notify
            .received
            .iter()
            .any(|m| m.lines().any(|l| l == "READY=1")),
        "no READY on failure"
    );
}

/// The root reads only `rundir`, `management` and `logging` before it starts the manager; an
/// error in any other section is the manager's to report, and it still stops the start:
/// exit 1, the error naming its path, nothing left running, no READY.
#[test]
fn an_invalid_section_the_root_does_not_read_is_a_clear_startup_error() {
    // The root passes over the sections it does not read: an invalid value there, or a
    // syntax error (a duplicate key), stops the start all the same, with the error named.
    for (name, section, error) in [
        (
            "bad-section",
            "dns64:\n  prefix: not-a-prefix\n",
            "/dns64/prefix",
        ),
        (
            "bad-syntax",
            "dns64:\n  prefix: 64:ff9b::/96\n  prefix: 64:ff9b::/96\n",
            "duplicate key",
        ),
    ] {
        let setup = Setup::new(name).extra(section);
        let mut r = common::launch(&setup).expect("launch");
        let status = r.launched.wait(START_TIMEOUT).expect("daemon exits");
        let text = r.launched.output.text();
        assert_eq!(status.code(), Some(1), "{name}: output:\n{text}");
        assert!(text.contains(error), "{name}: output:\n{text}");
        assert_nothing_started(&r);
    }
}

#[test]
fn one_manager_per_rundir() {
    let mut first = common::start(&Setup::new("lock")).expect("first resolver starts");
    // A second daemon with the same config must refuse to start and leave the first serving.
    let mut second = first
        .bed
        .launch(
            std::path::Path::new(common::DAEMON),
            &[
                &testbed::os("-c"),
                &testbed::os(first.dir.bed("config.yaml")),
            ],
            &[],
        )
        .expect("launch second");
    let status = second.wait(START_TIMEOUT).expect("second exits");
    assert_eq!(status.code(), Some(1));
    assert!(
        second.output.text().contains("another manager is running"),
        "{}",
        second.output.text()
    );
    assert!(first.dir.host("run/knot-resolver.pid").exists());
    assert_stops_cleanly(&mut first, Signal::SIGINT);
}
