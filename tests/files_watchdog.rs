//! The files watchdog on real kresd: an RPZ file with `watchdog: true` is re-read when it is
//! modified in place, replaced by an atomic rename (which upstream misses), or deleted and
//! created again — without restarting any worker.

mod common;

use std::time::{Duration, Instant};

use common::{Setup, DNS_TIMEOUT, START_TIMEOUT, STOP_TIMEOUT};
use nix::sys::signal::Signal;
use testbed::dns;

fn rpz(ip: &str) -> String {
    format!("$TTL 300\n@ SOA localhost. root.localhost. 1 3600 600 86400 300\nw.test A {ip}\n")
}

/// Wait (bounded) until w.test. answers `ip`.
fn wait_answer(r: &common::Resolver, ip: &str) {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let got: Vec<String> = dns::query_udp(r.dns(), "w.test.", dns::TYPE_A, DNS_TIMEOUT)
            .map(|resp| resp.a().iter().map(|a| a.to_string()).collect())
            .unwrap_or_default();
        if got == vec![ip.to_owned()] {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "w.test. never answered {ip} (last {got:?}):\n{}",
            r.launched.output.text()
        );
        // Each renew logs this line; wait for the next one rather than polling blindly.
        let _ = r.launched.output.wait_for(
            "Reloading watched files has finished",
            Duration::from_millis(200),
        );
    }
}

#[test]
fn rpz_changes_are_picked_up_without_restarting_workers() {
    let bed = testbed::Bed::get().expect("bed");
    let dir = bed.test_dir("watchdog-files").expect("dir");
    let (rpz_host, rpz_bed) = dir.join("zones/block.rpz");
    testbed::write(&rpz_host, &rpz("192.0.2.50")).expect("rpz");
    let setup = Setup::new("watchdog").workers(2).extra(&format!(
        "local-data:\n  rpz:\n    - file: {}\n      watchdog: true\n",
        rpz_bed.display()
    ));
    let mut r = common::start(&setup).expect("start");
    let workers = r.pids_named("kresd");
    wait_answer(&r, "192.0.2.50");

    // In place.
    std::fs::write(&rpz_host, rpz("192.0.2.51")).expect("rewrite");
    wait_answer(&r, "192.0.2.51");

    // Atomic replacement: a temporary file renamed over the watched one.
    let tmp = rpz_host.with_extension("tmp");
    std::fs::write(&tmp, rpz("192.0.2.52")).expect("tmp");
    std::fs::rename(&tmp, &rpz_host).expect("rename");
    wait_answer(&r, "192.0.2.52");

    // Deleted, then created again.
    std::fs::remove_file(&rpz_host).expect("delete");
    r.launched
        .output
        .wait_for("watched file was deleted", START_TIMEOUT)
        .expect("deletion noticed");
    std::fs::write(&rpz_host, rpz("192.0.2.53")).expect("recreate");
    wait_answer(&r, "192.0.2.53");

    assert_eq!(r.pids_named("kresd"), workers, "no worker restarted");
    r.launched.signal(Signal::SIGINT).expect("signal");
    assert_eq!(r.launched.wait(STOP_TIMEOUT).expect("exit").code(), Some(0));
}
