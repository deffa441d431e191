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

#[test]
fn a_replaced_certificate_is_reloaded_into_the_workers() {
    let bed = testbed::Bed::get().expect("bed");
    let certs = bed.test_dir("watchdog-certs").expect("dir");
    let (cert_host, cert_bed) = certs.join("tls/cert.pem");
    let (key_host, key_bed) = certs.join("tls/key.pem");
    std::fs::create_dir_all(cert_host.parent().expect("parent")).expect("dir");
    testbed::self_signed_cert("first.test", &cert_host, &key_host).expect("certificate");
    let dot = testbed::free_port().expect("port");
    let setup = Setup::new("watchdog-tls").workers(2).network(&format!(
        "    - interface: 127.0.0.1@{dot}\n      kind: dot\n  tls:\n    watchdog: true\n    cert-file: {}\n    key-file: {}\n",
        cert_bed.display(),
        key_bed.display()
    ));
    let mut r = common::start(&setup).expect("start");
    let workers = r.pids_named("kresd");
    // Whether the DoT listener presents a certificate that `ca` (a bed path) vouches for as `name`.
    let presents = |r: &common::Resolver, ca: &std::path::Path, name: &str| -> bool {
        let out = r
            .bed
            .run_installed(
                "/usr/bin/kdig",
                &[
                    "@127.0.0.1",
                    "-p",
                    &dot.to_string(),
                    &format!("+tls-ca={}", ca.display()),
                    &format!("+tls-hostname={name}"),
                    "+short",
                    "x.test",
                    "A",
                ],
            )
            .expect("kdig");
        let text = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        out.status.success() && !text.contains("failed")
    };
    let (first_copy_host, first_copy_bed) = certs.join("first-cert.pem");
    std::fs::copy(&cert_host, &first_copy_host).expect("keep the first certificate");
    assert!(
        presents(&r, &first_copy_bed, "first.test"),
        "the first certificate is served"
    );
    let reloads = r
        .launched
        .output
        .count("Reloading watched files has finished");

    // Replace both files atomically, as certificate renewal tools do.
    let (new_cert, new_key) = (certs.host("new-cert.pem"), certs.host("new-key.pem"));
    testbed::self_signed_cert("second.test", &new_cert, &new_key).expect("certificate");
    std::fs::rename(&new_key, &key_host).expect("rename key");
    std::fs::rename(&new_cert, &cert_host).expect("rename cert");
    r.launched
        .output
        .wait_for_count(
            "Reloading watched files has finished",
            reloads + 1,
            START_TIMEOUT,
        )
        .expect("renewed after the certificate changed");
    assert!(
        r.launched
            .output
            .text()
            .contains("TLS cert files reload triggered"),
        "{}",
        r.launched.output.text()
    );
    assert_eq!(r.pids_named("kresd"), workers, "no worker restarted");
    // The workers now present the new certificate, and no longer the old one.
    assert!(
        presents(&r, &cert_bed, "second.test"),
        "the new certificate is served"
    );
    assert!(
        !presents(&r, &first_copy_bed, "first.test"),
        "the old certificate is gone"
    );

    r.launched.signal(Signal::SIGINT).expect("signal");
    assert_eq!(r.launched.wait(STOP_TIMEOUT).expect("exit").code(), Some(0));
}
