//! Encrypted listeners on real kresd: DNS over TLS and DNS over HTTPS/2 answer through the
//! certificate from `network.tls`, next to plain DNS on the same resolver.

mod common;

use common::{Setup, STOP_TIMEOUT};
use nix::sys::signal::Signal;

#[test]
fn dot_and_doh2_answer_with_the_configured_certificate() {
    let bed = testbed::Bed::get().expect("bed");
    let certs = bed.test_dir("tls-certs").expect("dir");
    let (cert_host, cert_bed) = certs.join("cert.pem");
    let (key_host, key_bed) = certs.join("key.pem");
    testbed::self_signed_cert("resolver.test", &cert_host, &key_host).expect("certificate");
    let (dot, doh) = (
        testbed::free_port().expect("port"),
        testbed::free_port().expect("port"),
    );
    let setup = Setup::new("tls-listeners")
        .workers(2)
        .extra("local-data:\n  records: |\n    t.test. 300 A 192.0.2.77\n")
        .network(&format!(
            "    - interface: 127.0.0.1@{dot}\n      kind: dot\n    - interface: 127.0.0.1@{doh}\n      kind: doh2\n  tls:\n    cert-file: {}\n    key-file: {}\n",
            cert_bed.display(),
            key_bed.display()
        ));
    let mut r = common::start(&setup).expect("start");

    let kdig = |args: &[&str]| {
        let out = bed.run_installed("/usr/bin/kdig", args).expect("kdig runs");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let dot_port = dot.to_string();
    let doh_port = doh.to_string();
    assert_eq!(
        kdig(&[
            "@127.0.0.1",
            "-p",
            &dot_port,
            "+tls",
            "+short",
            "t.test",
            "A"
        ]),
        "192.0.2.77"
    );
    assert_eq!(
        kdig(&[
            "@127.0.0.1",
            "-p",
            &doh_port,
            "+https",
            "+short",
            "t.test",
            "A"
        ]),
        "192.0.2.77"
    );
    // The session is really TLS, with our certificate.
    let verbose = kdig(&["@127.0.0.1", "-p", &dot_port, "+tls", "t.test", "A"]);
    assert!(verbose.contains("TLS session"), "{verbose}");
    // Plain DNS still answers on the first listener.
    let plain = testbed::dns::query_udp(
        r.dns(),
        "t.test.",
        testbed::dns::TYPE_A,
        common::DNS_TIMEOUT,
    )
    .expect("plain DNS");
    assert_eq!(plain.a().len(), 1);

    r.launched.signal(Signal::SIGINT).expect("signal");
    assert_eq!(r.launched.wait(STOP_TIMEOUT).expect("exit").code(), Some(0));
}
