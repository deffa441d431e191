//! Zone transfers of RPZ zones against a real primary (knotd in the test bed) and hostile
//! ones written here.

use testbed::knot::{KeySetup, KnotPrimary, PrimarySetup};

/// kdig's transfer of `query` ("AXFR", "IXFR=1") from `primary`, signed with its key.
fn kdig_transfer(bed: &testbed::Bed, primary: &KnotPrimary, query: &str) -> String {
    let key = format!("hmac-sha256:xfr-key.:{}", primary.secret().expect("a key"));
    let port = primary.port().to_string();
    let args = ["-y", &key, "@127.0.0.1", "-p", &port, primary.zone(), query];
    let out = bed.run_installed("kdig", &args).expect("kdig");
    testbed::succeeded("kdig", &out).expect("kdig succeeded")
}

#[test]
fn the_knotd_primary_serves_its_zone_and_its_changes_as_ixfr() {
    let bed = testbed::Bed::get().expect("bed");
    let setup = PrimarySetup {
        zone: "blocklist.rpz.".into(),
        entries: 10,
        key: KeySetup::Generated,
        notify: None,
    };
    let mut primary = KnotPrimary::start(bed, setup).expect("knotd");
    let axfr = kdig_transfer(bed, &primary, "AXFR");
    assert!(axfr.contains("n9.blocked.test.blocklist.rpz."), "{axfr}");
    assert_eq!(
        primary
            .bump(&["new.blocked.test"], &["n3.blocked.test"])
            .unwrap(),
        2
    );
    let ixfr = kdig_transfer(bed, &primary, "IXFR=1");
    assert!(ixfr.contains("new.blocked.test.blocklist.rpz."), "{ixfr}");
    assert!(
        !ixfr.contains("n4.blocked.test"),
        "an IXFR, not the whole zone: {ixfr}"
    );
    let log = primary.output().text();
    assert!(log.contains("IXFR, outgoing"), "{log}");
}
