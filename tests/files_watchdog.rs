//! The files watchdog on real kresd: an RPZ file with `watchdog: true` is re-read when it is
//! modified in place, replaced by an atomic rename (which upstream misses), or deleted and
//! created again — without restarting any worker. With `--watch-config`, the configuration
//! files themselves: rewritten in place, or swapped the way a Kubernetes ConfigMap volume
//! swaps them (a `..data` symlink renamed over), are reloaded; a broken one is refused while
//! the running configuration keeps serving.

mod common;

use std::time::{Duration, Instant};

use common::{Setup, DNS_TIMEOUT, START_TIMEOUT, STOP_TIMEOUT};
use nix::sys::signal::Signal;
use testbed::dns;

fn rpz(ip: &str) -> String {
    format!("$TTL 300\n@ SOA localhost. root.localhost. 1 3600 600 86400 300\nw.test A {ip}\n")
}

/// Local data answering `ip` for w.test.
fn addresses(ip: &str) -> String {
    format!("local-data:\n  addresses:\n    w.test: {ip}\n")
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
    let mut events = testbed::http::EventStream::open(&r.api, "/events", &[]).expect("events");

    // In place.
    std::fs::write(&rpz_host, rpz("192.0.2.51")).expect("rewrite");
    wait_answer(&r, "192.0.2.51");
    // Followers of /events see a renew asked by the watchdog.
    let renewing = loop {
        let message = events
            .next(START_TIMEOUT)
            .expect("an event")
            .expect("not ended");
        let data: serde_json::Value = serde_json::from_str(&message.data).expect("JSON");
        if data["kind"] == "config-renewing" {
            break data;
        }
    };
    assert_eq!(renewing["origin"], "watched-file", "{renewing}");
    drop(events);

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

#[test]
fn watched_configuration_files_are_reloaded_also_through_a_configmap_swap() {
    let setup = Setup::new("watch-config")
        .extra(&addresses("192.0.2.60"))
        .arg("--watch-config");
    let mut r = common::start(&setup).expect("start");
    wait_answer(&r, "192.0.2.60");
    let config_for = |ip: &str| {
        let changed = Setup::new("watch-config").extra(&addresses(ip));
        common::config_yaml(&r.dir, r.port, &changed)
    };
    let dir = r.config.parent().expect("config dir").to_owned();

    // Rewritten in place.
    std::fs::write(&r.config, config_for("192.0.2.61")).expect("rewrite");
    wait_answer(&r, "192.0.2.61");

    // Becomes a ConfigMap-style mount: config.yaml -> ..data/config.yaml, ..data -> ..v1.
    std::fs::create_dir_all(dir.join("..v1")).expect("..v1");
    std::fs::write(dir.join("..v1/config.yaml"), config_for("192.0.2.62")).expect("v1");
    std::os::unix::fs::symlink("..v1", dir.join("..data")).expect("..data");
    std::os::unix::fs::symlink("..data/config.yaml", dir.join("config.tmp")).expect("link");
    std::fs::rename(dir.join("config.tmp"), &r.config).expect("rename over");
    wait_answer(&r, "192.0.2.62");

    // The kubelet's update: a new directory, a new `..data` renamed over the old one; the
    // file's own name sees no event.
    std::fs::create_dir_all(dir.join("..v2")).expect("..v2");
    std::fs::write(dir.join("..v2/config.yaml"), config_for("192.0.2.63")).expect("v2");
    std::os::unix::fs::symlink("..v2", dir.join("..data_tmp")).expect("..data_tmp");
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("swap");
    wait_answer(&r, "192.0.2.63");

    // A broken update is refused; the running configuration keeps answering.
    let refused = r.launched.output.count("watched file changed");
    std::fs::create_dir_all(dir.join("..v3")).expect("..v3");
    std::fs::write(dir.join("..v3/config.yaml"), "workers: many\n").expect("v3");
    std::os::unix::fs::symlink("..v3", dir.join("..data_tmp")).expect("..data_tmp");
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("swap");
    r.launched
        .output
        .wait_for_count("watched file changed", refused + 1, START_TIMEOUT)
        .expect("the broken update is seen");
    r.launched
        .output
        .wait_for(
            "reload failed; the running configuration is unchanged",
            START_TIMEOUT,
        )
        .expect("the broken update is refused");
    r.launched
        .output
        .wait_for("[/workers]", START_TIMEOUT)
        .expect("the refusal names the offending key");
    let a = dns::query_udp(r.dns(), "w.test.", dns::TYPE_A, DNS_TIMEOUT).expect("answer");
    assert_eq!(
        a.a(),
        vec!["192.0.2.63".parse::<std::net::Ipv4Addr>().unwrap()]
    );

    r.launched.signal(Signal::SIGINT).expect("signal");
    assert_eq!(r.launched.wait(STOP_TIMEOUT).expect("exit").code(), Some(0));
}
