//! Zone transfers of RPZ zones against a real primary (knotd in the test bed) and hostile
//! ones written here.

use std::time::Duration;

use knot_resolver::rpz::{
    self, Limits, NotifyListener, NotifyZone, Primary, TransferKind, TsigKey,
};
use testbed::knot::{KeySetup, KnotPrimary, PrimarySetup};
use tokio_util::sync::CancellationToken;

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

/// A runtime for the async parts of a test (our processes use a single-threaded one).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

fn knotd(entries: usize, notify: Option<std::net::SocketAddr>) -> KnotPrimary {
    let bed = testbed::Bed::get().expect("bed");
    let setup = PrimarySetup {
        zone: "blocklist.rpz.".into(),
        entries,
        key: KeySetup::Generated,
        notify,
    };
    KnotPrimary::start(bed, setup).expect("knotd")
}

fn key_of(primary: &KnotPrimary) -> TsigKey {
    TsigKey::parse(&primary.key_file_text().expect("a key")).expect("the key parses")
}

#[test]
fn axfr_then_ixfr_then_up_to_date_from_knotd() {
    let mut primary = knotd(100, None);
    let dir = tempdir("transfers");
    let file = dir.join("blocklist.rpz");
    let key = key_of(&primary);
    let from = Primary {
        addr: primary.addr(),
    };
    let limits = Limits::default();
    let rt = runtime();
    let refresh = |rt: &tokio::runtime::Runtime| {
        rt.block_on(rpz::refresh(
            "blocklist.rpz",
            &from,
            Some(&key),
            &file,
            &limits,
        ))
    };

    let first = refresh(&rt).expect("the first transfer");
    assert_eq!((first.kind, first.serial), (TransferKind::Axfr, 1));
    assert_eq!(first.records, 102, "SOA, 100 entries, SOA");
    assert_eq!(first.timers.refresh, Duration::from_secs(300));
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.lines().count(), 102, "header, SOA, 100 entries");
    assert!(text.contains("\nn99.blocked.test.blocklist.rpz. 3600 IN CNAME .\n"));
    assert_eq!(rpz::stored(&file).map(|(serial, _)| serial), Some(1));

    primary
        .bump(&["new.blocked.test"], &["n7.blocked.test"])
        .unwrap();
    let second = refresh(&rt).expect("the second transfer");
    assert_eq!((second.kind, second.serial), (TransferKind::Ixfr, 2));
    primary
        .output()
        .wait_for("IXFR, outgoing", Duration::from_secs(5))
        .unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("\nnew.blocked.test.blocklist.rpz. 3600 IN CNAME .\n"));
    assert!(!text.contains("\nn7.blocked.test."));
    assert_eq!(text.lines().count(), 102);
    assert_eq!(rpz::stored(&file).map(|(serial, _)| serial), Some(2));

    let third = refresh(&rt).expect("the third refresh");
    assert_eq!(
        (third.kind, third.serial, third.records),
        (TransferKind::UpToDate, 2, 0)
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    assert_eq!(
        primary.output().count("AXFR, outgoing"),
        2,
        "started and finished once"
    );
}

#[test]
fn a_wrong_key_is_a_tsig_error_and_the_file_stays() {
    let mut primary = knotd(10, None);
    let dir = tempdir("wrong-key");
    let file = dir.join("blocklist.rpz");
    let from = Primary {
        addr: primary.addr(),
    };
    let rt = runtime();
    let limits = Limits::default();
    rt.block_on(rpz::refresh(
        "blocklist.rpz.",
        &from,
        Some(&key_of(&primary)),
        &file,
        &limits,
    ))
    .expect("the first transfer");
    let before = std::fs::read_to_string(&file).unwrap();
    primary.bump(&["new.blocked.test"], &[]).unwrap();
    let wrong = TsigKey::parse(
        "key \"xfr-key.\" { algorithm hmac-sha256; secret \"d3Jvbmctc2VjcmV0LXdyb25nLXNlY3JldC13cm9uZyE=\"; };",
    )
    .unwrap();
    let error = rt
        .block_on(rpz::refresh(
            "blocklist.rpz.",
            &from,
            Some(&wrong),
            &file,
            &limits,
        ))
        .unwrap_err();
    assert_eq!(error.reason(), "tsig", "{error}");
    let unsigned = rt
        .block_on(rpz::refresh("blocklist.rpz.", &from, None, &file, &limits))
        .unwrap_err();
    assert_eq!(unsigned.reason(), "refused", "{unsigned}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), before);
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        1,
        "no temporary file left"
    );
}

/// A fresh directory for a test's files.
fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("rpz-transfer-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a test directory");
    dir
}

#[test]
fn knotd_notifies_over_tcp_signed_and_the_listener_accepts() {
    let rt = runtime();
    let bed = testbed::Bed::get().expect("bed");
    let secret = testbed::knot::base64(b"a secret shared with the primary!");
    let key = TsigKey::parse(&format!(
        "key \"xfr-key.\" {{ algorithm hmac-sha256; secret \"{secret}\"; }};"
    ))
    .expect("the key parses");
    let zone = NotifyZone {
        zone: "blocklist.rpz.".to_owned(),
        primaries: vec!["127.0.0.1".parse().expect("an address")],
        key: Some(key),
    };
    // The listener runs on a thread (and runtime) of its own while the test drives knotd.
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let stop = CancellationToken::new();
    let (bound_tx, bound) = std::sync::mpsc::channel();
    let served = std::thread::spawn({
        let stop = stop.clone();
        move || {
            runtime().block_on(async {
                let any = "127.0.0.1:0".parse().expect("an address");
                let listener = NotifyListener::bind(any, vec![zone]).await;
                let listener = listener.expect("the listener binds");
                let _ = bound_tx.send(listener.local_addr().expect("its address"));
                listener.serve(tx, stop).await
            })
        }
    });
    let addr = bound.recv().expect("the listener's address");
    let setup = PrimarySetup {
        zone: "blocklist.rpz.".into(),
        entries: 10,
        key: KeySetup::Secret(secret),
        notify: Some(addr),
    };
    let mut primary = KnotPrimary::start(bed, setup).expect("knotd");
    let mut next = || {
        rt.block_on(async { tokio::time::timeout(Duration::from_secs(30), rx.recv()).await })
            .expect("a NOTIFY within 30 s")
            .expect("the listener runs")
    };
    // knotd notifies when it loads the zone, and at every change.
    assert_eq!(next().serial, Some(1));
    primary.bump(&["new.blocked.test"], &[]).unwrap();
    let notified = next();
    assert_eq!(notified.zone, "blocklist.rpz.");
    assert_eq!(notified.serial, Some(2));
    assert_eq!(notified.from.ip(), addr.ip());
    // knotd took our answers: its log has each NOTIFY as sent over TCP, none failed.
    let log = primary.output();
    log.wait_for_count("notify, outgoing", 2, Duration::from_secs(10))
        .unwrap();
    let text = log.text();
    assert!(
        text.contains("notify, outgoing, remote 127.0.0.1@"),
        "{text}"
    );
    assert!(text.contains(" TCP, key xfr-key., serial 2"), "{text}");
    assert_eq!(log.count("failed"), 0, "{text}");
    stop.cancel();
    served.join().unwrap();
}
