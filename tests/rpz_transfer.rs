//! Zone transfers of RPZ zones against a real primary (knotd in the test bed) and hostile
//! ones written here.

mod common;

use std::time::Duration;

use kres_daemon::rpz::{self, Limits, NotifyListener, NotifyZone, Primary, TransferKind, TsigKey};
use testbed::knot::{KeySetup, KnotPrimary, PrimarySetup};
use tokio_util::sync::CancellationToken;

/// Held alone by the tests that measure this process's memory or the disk a transfer
/// writes, and shared by every other test of this file: the peak of resident memory is the
/// whole process's (one test resets it), and nothing else may allocate while it is measured.
static MEASURING: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

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
    let _shared = MEASURING.blocking_read();
    let bed = testbed::Bed::get().expect("bed");
    let setup = PrimarySetup {
        zone: "blocklist.rpz.".into(),
        entries: 10,
        key: KeySetup::Generated,
        notify: None,
    };
    let mut primary = KnotPrimary::start(bed, setup).expect("knotd");
    let axfr = kdig_transfer(bed, &primary, "AXFR");
    assert!(axfr.contains("n9.blocked.zz.blocklist.rpz."), "{axfr}");
    assert_eq!(
        primary
            .bump(&["new.blocked.zz"], &["n3.blocked.zz"])
            .unwrap(),
        2
    );
    let ixfr = kdig_transfer(bed, &primary, "IXFR=1");
    assert!(ixfr.contains("new.blocked.zz.blocklist.rpz."), "{ixfr}");
    assert!(
        !ixfr.contains("n4.blocked.zz"),
        "an IXFR, not the whole zone: {ixfr}"
    );
    // knotd logs the transfer once it is over, which kdig may see first.
    primary
        .output()
        .wait_for("IXFR, outgoing", Duration::from_secs(5))
        .unwrap();
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
    let _shared = MEASURING.blocking_read();
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
    assert_eq!(first.records, 103, "SOA, NS, 100 entries, SOA");
    assert_eq!(first.timers.refresh, Duration::from_secs(300));
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.lines().count(), 103, "header, SOA, NS, 100 entries");
    assert!(text.contains("\nn99.blocked.zz.blocklist.rpz. 3600 IN CNAME .\n"));
    assert_eq!(rpz::stored(&file).map(|(serial, _)| serial), Some(1));

    primary
        .bump(&["new.blocked.zz"], &["n7.blocked.zz"])
        .unwrap();
    let second = refresh(&rt).expect("the second transfer");
    assert_eq!((second.kind, second.serial), (TransferKind::Ixfr, 2));
    primary
        .output()
        .wait_for("IXFR, outgoing", Duration::from_secs(5))
        .unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("\nnew.blocked.zz.blocklist.rpz. 3600 IN CNAME .\n"));
    assert!(!text.contains("\nn7.blocked.zz."));
    assert_eq!(text.lines().count(), 103);
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

    // Two changes in one IXFR: the first's addition is the second's deletion.
    primary
        .bump(&["brief.blocked.zz", "third.blocked.zz"], &[])
        .unwrap();
    primary
        .bump(&[], &["brief.blocked.zz", "n8.blocked.zz"])
        .unwrap();
    let fourth = refresh(&rt).expect("the fourth refresh");
    assert_eq!((fourth.kind, fourth.serial), (TransferKind::Ixfr, 4));
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("\nthird.blocked.zz.blocklist.rpz. 3600 IN CNAME .\n"));
    assert!(!text.contains("brief.blocked.zz") && !text.contains("\nn8.blocked.zz"));
    assert_eq!(text.lines().count(), 103);
    let axfrs = primary.output().count("AXFR, outgoing");
    assert_eq!(axfrs, 2, "still the first AXFR only");

    // A stored file that lost what an IXFR deletes has diverged: the zone comes whole.
    let edited: String = text
        .lines()
        .filter(|l| !l.starts_with("n9.blocked.zz."))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&file, edited).unwrap();
    primary.bump(&[], &["n9.blocked.zz"]).unwrap();
    let fifth = refresh(&rt).expect("the fifth refresh");
    assert_eq!((fifth.kind, fifth.serial), (TransferKind::Axfr, 5));
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("\nn10.blocked.zz.blocklist.rpz. 3600 IN CNAME .\n"));
    assert_eq!(text.lines().count(), 102);
}

#[test]
fn a_wrong_key_is_a_tsig_error_and_the_file_stays() {
    let _shared = MEASURING.blocking_read();
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
    primary.bump(&["new.blocked.zz"], &[]).unwrap();
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

#[test]
fn a_transferred_zone_blocks_its_names_in_kresd() {
    let _shared = MEASURING.blocking_read();
    let mut primary = knotd(100, None);
    let bed = testbed::Bed::get().expect("bed");
    let dir = bed.test_dir("rpz-kresd").expect("dir");
    let (file, file_in_bed) = dir.join("blocklist.rpz");
    let key = key_of(&primary);
    let from = Primary {
        addr: primary.addr(),
    };
    let rt = runtime();
    let limits = Limits::default();
    let refresh = || {
        rt.block_on(rpz::refresh(
            "blocklist.rpz.",
            &from,
            Some(&key),
            &file,
            &limits,
        ))
    };
    assert_eq!(refresh().expect("AXFR").kind, TransferKind::Axfr);
    primary
        .bump(&["new.blocked.zz"], &["n7.blocked.zz"])
        .unwrap();
    assert_eq!(refresh().expect("IXFR").kind, TransferKind::Ixfr);

    let setup = common::Setup::new("rpz-transfer").extra(&format!(
        "local-data:\n  rpz:\n    - file: {}\n",
        file_in_bed.display()
    ));
    let r = common::start(&setup).expect("start");
    // No answer in time (the bed has no network) is no NXDOMAIN either.
    let rcode = |name: &str| {
        testbed::dns::query_udp(r.dns(), name, testbed::dns::TYPE_A, common::DNS_TIMEOUT)
            .map_or(u8::MAX, |answer| answer.rcode)
    };
    // `CNAME .` is RPZ's NXDOMAIN: kresd's loader read the file the transfers wrote.
    assert_eq!(rcode("n5.blocked.zz."), testbed::dns::RCODE_NXDOMAIN);
    assert_eq!(rcode("new.blocked.zz."), testbed::dns::RCODE_NXDOMAIN);
    assert_ne!(
        rcode("n7.blocked.zz."),
        testbed::dns::RCODE_NXDOMAIN,
        "deleted by the IXFR"
    );
    let log = r.launched.output.text();
    assert!(
        !log.contains("blocklist.rpz") || !log.contains("error"),
        "{log}"
    );
    r.stop();
}

/// A fresh directory for a test's files.
fn tempdir(name: &str) -> TempDir {
    let dir = std::env::temp_dir().join(format!("rpz-transfer-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a test directory");
    TempDir(dir)
}

/// A test's directory, removed with everything in it when the test ends.
struct TempDir(std::path::PathBuf);

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;

    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for TempDir {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn knotd_notifies_over_tcp_signed_and_the_listener_accepts() {
    let _shared = MEASURING.blocking_read();
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
    primary.bump(&["new.blocked.zz"], &[]).unwrap();
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

/// The secret the hostile primaries and their tests share.
const HOSTILE_SECRET: &[u8] = b"hostile but signed, hostile but signed";

/// The key file text of [`HOSTILE_SECRET`], and the library's key for the primary.
fn hostile_key() -> (TsigKey, std::sync::Arc<domain::tsig::Key>) {
    let text = format!(
        "key \"xfr-key.\" {{ algorithm hmac-sha256; secret \"{}\"; }};",
        testbed::knot::base64(HOSTILE_SECRET)
    );
    let name = std::str::FromStr::from_str("xfr-key.").expect("a key name");
    let key = domain::tsig::Key::new(
        domain::tsig::Algorithm::Sha256,
        HOSTILE_SECRET,
        name,
        None,
        None,
    )
    .expect("a key");
    (
        TsigKey::parse(&text).expect("the key parses"),
        std::sync::Arc::new(key),
    )
}

/// Refresh `file` from a hostile primary behaving so, within `limits`.
async fn from_hostile(
    behaviour: hostile::Behaviour,
    file: &std::path::Path,
    limits: &Limits,
) -> Result<rpz::TransferReport, rpz::TransferError> {
    let (key, primary_key) = hostile_key();
    let addr = hostile::start(behaviour, Some(primary_key)).await;
    rpz::refresh(hostile::ZONE, &Primary { addr }, Some(&key), file, limits).await
}

#[tokio::test]
async fn an_endless_transfer_is_cut_at_its_bound_and_leaves_nothing() {
    let _shared = MEASURING.read().await;
    let dir = tempdir("endless");
    let file = dir.join("hostile.rpz");
    let records = Limits {
        max_records: 50_000,
        ..Limits::default()
    };
    let endless = hostile::Behaviour::Endless { soa: 1 };
    let error = from_hostile(endless, &file, &records).await.unwrap_err();
    assert_eq!(error.reason(), "too-large", "{error}");
    assert_eq!(
        error.to_string(),
        "the transfer is too large: more than 50000 records"
    );
    let bytes = Limits {
        max_bytes: 1 << 20,
        ..Limits::default()
    };
    let error = from_hostile(endless, &file, &bytes).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "the transfer is too large: more than 1048576 bytes"
    );
    let time = Limits {
        max_duration: Duration::from_millis(300),
        ..Limits::default()
    };
    let error = from_hostile(endless, &file, &time).await.unwrap_err();
    assert_eq!(error.reason(), "timeout", "{error}");
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "no file, no temporary file"
    );
}

/// A value in kB of this process's `/proc/self/status` (VmRSS, VmHWM).
fn status_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("our status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("the field")
}

#[tokio::test]
async fn an_endless_transfer_holds_a_message_in_memory_not_the_zone() {
    let _measuring = MEASURING.write().await;
    let dir = tempdir("flood");
    let file = dir.join("hostile.rpz");
    let limits = Limits {
        max_bytes: 64 << 20,
        ..Limits::default()
    };
    // The peak of resident memory starts again from here (Linux: "5" to clear_refs).
    std::fs::write("/proc/self/clear_refs", "5").expect("the peak resets");
    let before = status_kb("VmRSS:");
    let flood = hostile::Behaviour::Flood { soa: 1 };
    let error = from_hostile(flood, &file, &limits).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "the transfer is too large: more than 67108864 bytes"
    );
    let grown = status_kb("VmHWM:").saturating_sub(before);
    assert!(
        grown < 16 * 1024,
        "64 MiB received, the peak grew by {grown} kB"
    );
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "the temporary file is gone"
    );
}

#[tokio::test]
async fn an_ixfr_of_compressed_deletions_stays_within_its_memory_budget() {
    let _measuring = MEASURING.write().await;
    let dir = tempdir("deletions");
    let file = dir.join("hostile.rpz");
    let limits = Limits::default();
    from_hostile(hostile::Behaviour::Serving { soa: 1 }, &file, &limits)
        .await
        .expect("the first transfer");
    // The peak of resident memory starts again from here (Linux: "5" to clear_refs).
    std::fs::write("/proc/self/clear_refs", "5").expect("the peak resets");
    let before = status_kb("VmRSS:");
    // 200,000 deletions of 249-octet names, 22 bytes each on the wire (4.4 MB): as keys
    // they would need about 100 MB, more than the budget allows.
    let deletions = hostile::Behaviour::IxfrDeletions {
        soa: 2,
        deletions: 200_000,
    };
    let report = from_hostile(deletions, &file, &limits)
        .await
        .expect("the zone, transferred whole");
    let grown = status_kb("VmHWM:").saturating_sub(before);
    eprintln!(
        "an IXFR of 200,000 compressed deletions: {} bytes received, the peak of resident \
         memory grew by {grown} kB (budget {} kB)",
        report.bytes,
        limits.max_ixfr_memory / 1024
    );
    assert_eq!((report.kind, report.serial), (TransferKind::Axfr, 2));
    assert!(
        grown * 1024 < limits.max_ixfr_memory,
        "the peak grew by {grown} kB"
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("\nn2.hostile.rpz. 60 IN CNAME .\n"), "{text}");
    assert_eq!(text.lines().count(), 5, "header, SOA, 3 entries: {text}");
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        1,
        "no temporary file"
    );
}

/// The largest size any file in a directory had, sampled by a thread until it is asked.
struct LargestFile {
    /// Set to stop sampling.
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The sampler; it returns the largest size it saw.
    sampler: std::thread::JoinHandle<u64>,
}

impl LargestFile {
    fn watch(dir: &std::path::Path) -> LargestFile {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = std::thread::spawn({
            let (dir, stop) = (dir.to_owned(), stop.clone());
            move || {
                let mut largest = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for entry in std::fs::read_dir(&dir).expect("the directory").flatten() {
                        let size = entry.metadata().map_or(0, |m| m.len());
                        largest = largest.max(size);
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                largest
            }
        });
        LargestFile { stop, sampler }
    }

    fn largest(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.sampler.join().expect("the sampler")
    }
}

/// The number after `before` in `text`.
fn number_after(text: &str, before: &str) -> u64 {
    let rest = &text[text.find(before).expect(before) + before.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().expect("a number")
}

#[tokio::test]
async fn a_cut_axfr_of_compressed_names_writes_no_more_than_it_received_allows() {
    let _measuring = MEASURING.write().await;
    let dir = tempdir("cut");
    let file = dir.join("hostile.rpz");
    let limits = Limits::default();
    let (key, primary_key) = hostile_key();
    // 100,000 records of 22 bytes on the wire, about 1,850 characters each as text.
    let cut = hostile::Behaviour::CutCompressed {
        soa: 1,
        records: 100_000,
    };
    let (addr, sent) = hostile::start_counting(cut, Some(primary_key)).await;
    let largest = LargestFile::watch(&dir);
    let error = rpz::refresh(hostile::ZONE, &Primary { addr }, Some(&key), &file, &limits)
        .await
        .unwrap_err();
    let written = largest.largest();
    let sent = sent.load(std::sync::atomic::Ordering::Relaxed);
    let text = error.to_string();
    eprintln!(
        "a cut AXFR of 100,000 compressed records: the primary sent {sent} bytes, the \
         temporary file reached {written} bytes; {text}"
    );
    assert_eq!(error.reason(), "too-large", "{error}");
    let received = number_after(&text, " bytes from ");
    assert!(received <= sent, "{text}");
    assert!(
        text.ends_with(&format!(
            "bytes received (at most {} times as much, plus {} bytes)",
            limits.max_text_ratio, limits.text_margin
        )),
        "{text}"
    );
    let bound = limits.max_text_ratio * received + limits.text_margin;
    assert!(written <= bound, "{written} bytes written, {bound} allowed");
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "no file, no temporary file"
    );
}

#[tokio::test]
async fn garbage_silence_and_an_unsigned_end_are_refused() {
    let _shared = MEASURING.read().await;
    let dir = tempdir("garbage");
    let file = dir.join("hostile.rpz");
    let limits = Limits {
        idle: Duration::from_millis(200),
        ..Limits::default()
    };
    let error = from_hostile(hostile::Behaviour::Garbage, &file, &limits)
        .await
        .unwrap_err();
    assert_eq!(error.reason(), "malformed", "{error}");
    let error = from_hostile(hostile::Behaviour::Silent, &file, &limits)
        .await
        .unwrap_err();
    assert_eq!(error.reason(), "timeout", "{error}");
    assert!(error.to_string().contains("idle bound"), "{error}");
    let unsigned = hostile::Behaviour::UnsignedLast { soa: 3 };
    let error = from_hostile(unsigned, &file, &limits).await.unwrap_err();
    assert_eq!(error.to_string(), "TSIG: the last message is not signed");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    // The same primary, signing its last message: the file is written.
    let serving = hostile::Behaviour::Serving { soa: 3 };
    let report = from_hostile(serving, &file, &limits)
        .await
        .expect("a transfer");
    assert_eq!(
        (report.kind, report.serial, report.records),
        (TransferKind::Axfr, 3, 5)
    );
    // An IXFR answered with the SOA alone: the primary offers none, the zone is transferred.
    let condensed = hostile::Behaviour::Condensed { soa: 4 };
    let report = from_hostile(condensed, &file, &limits)
        .await
        .expect("a transfer");
    assert_eq!((report.kind, report.serial), (TransferKind::Axfr, 4));
}

#[tokio::test]
async fn a_serial_going_back_is_an_error_and_the_file_stays() {
    let _shared = MEASURING.read().await;
    let dir = tempdir("backwards");
    let file = dir.join("hostile.rpz");
    let limits = Limits::default();
    from_hostile(hostile::Behaviour::Serving { soa: 10 }, &file, &limits)
        .await
        .expect("the first transfer");
    let before = std::fs::read_to_string(&file).unwrap();
    let error = from_hostile(hostile::Behaviour::Serving { soa: 9 }, &file, &limits)
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "the primary's serial 9 is older than the stored serial 10"
    );
    assert_eq!(error.reason(), "serial-backwards");
    // Past the wrap of serial arithmetic (RFC 1982) it is newer, and taken.
    let report = from_hostile(
        hostile::Behaviour::Serving {
            soa: 10 + (1 << 31) - 1,
        },
        &file,
        &limits,
    )
    .await
    .expect("a newer serial");
    assert_eq!(report.serial, 10 + (1 << 31) - 1);
    assert_eq!(
        report.kind,
        TransferKind::Axfr,
        "an IXFR answered with the whole zone"
    );
    assert_ne!(std::fs::read_to_string(&file).unwrap(), before);
}

/// Primaries that misbehave on purpose, written here: in-process TCP servers on loopback.
mod hostile {
    use std::net::SocketAddr;
    use std::str::FromStr;
    use std::sync::Arc;

    use std::sync::atomic::{AtomicU64, Ordering};

    use domain::base::iana::Rtype;
    use domain::base::message_builder::TreeCompressor;
    use domain::base::{Message, MessageBuilder, Name, Serial, Ttl};
    use domain::rdata::tsig::Time48;
    use domain::rdata::{Cname, Soa, Txt};
    use domain::tsig;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    pub const ZONE: &str = "hostile.rpz.";

    /// How the primary misbehaves.
    #[derive(Clone, Copy, Debug)]
    pub enum Behaviour {
        /// Its SOA says `soa`; its AXFR never ends (messages of 100 records forever).
        Endless { soa: u32 },
        /// As `Endless`, with records of 1,000 bytes of text (50 to a message).
        Flood { soa: u32 },
        /// Bytes that are no DNS message in answer to anything.
        Garbage,
        /// Its SOA says `soa`; its AXFR is a whole zone at that serial.
        Serving { soa: u32 },
        /// Accepts connections and never answers.
        Silent,
        /// Its IXFR answer is the SOA alone (it offers none); its AXFR a whole zone.
        Condensed { soa: u32 },
        /// A whole zone whose last message is not signed.
        UnsignedLast { soa: u32 },
        /// Its SOA says `soa`; its IXFR deletes `deletions` records of the longest names
        /// (that need not exist) in one change, every name compressed to a few bytes; its
        /// AXFR is a whole zone at `soa`.
        IxfrDeletions { soa: u32, deletions: u32 },
        /// Its SOA says `soa`; its AXFR brings `records` records of the longest names, every
        /// name compressed to a few bytes, and stops before the closing SOA.
        CutCompressed { soa: u32, records: u32 },
    }

    /// Start a primary behaving so; its address. It stops with the test's runtime.
    pub async fn start(behaviour: Behaviour, key: Option<Arc<tsig::Key>>) -> SocketAddr {
        start_counting(behaviour, key).await.0
    }

    /// As [`start`], with the count of the bytes it has sent.
    pub async fn start_counting(
        behaviour: Behaviour,
        key: Option<Arc<tsig::Key>>,
    ) -> (SocketAddr, Arc<AtomicU64>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let addr = listener.local_addr().expect("its address");
        let sent = Arc::new(AtomicU64::new(0));
        let counted = sent.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, behaviour, key.clone(), counted.clone()));
            }
        });
        (addr, sent)
    }

    async fn serve(
        mut stream: TcpStream,
        behaviour: Behaviour,
        key: Option<Arc<tsig::Key>>,
        sent: Arc<AtomicU64>,
    ) {
        let Ok(len) = stream.read_u16().await else {
            return;
        };
        let mut query = vec![0; usize::from(len)];
        if stream.read_exact(&mut query).await.is_err() {
            return;
        }
        let mut query = Message::from_octets(query).expect("our own query parses");
        let mut signer = key.and_then(|key| {
            tsig::ServerSequence::request(&key, &mut query, Time48::now()).expect("signed right")
        });
        let qtype = query.sole_question().expect("one question").qtype();
        let serial = match behaviour {
            Behaviour::Silent => {
                let _ = stream.read_u16().await;
                return;
            }
            Behaviour::Garbage => {
                let _ = stream
                    .write_all(b"\x00\x20garbage, garbage, garbage, garb")
                    .await;
                return;
            }
            Behaviour::Endless { soa } | Behaviour::Flood { soa } | Behaviour::Serving { soa } => {
                soa
            }
            Behaviour::UnsignedLast { soa } | Behaviour::Condensed { soa } => soa,
            Behaviour::IxfrDeletions { soa, .. } | Behaviour::CutCompressed { soa, .. } => soa,
        };
        let zone = Name::<Vec<u8>>::from_str(ZONE).expect("a name");
        let soa = (
            zone.clone(),
            Ttl::from_secs(60),
            Soa::new(
                zone.clone(),
                zone.clone(),
                Serial(serial),
                Ttl::from_secs(300),
                Ttl::from_secs(60),
                Ttl::from_secs(3600),
                Ttl::from_secs(60),
            ),
        );
        // Generated as they are sent: the primary holds one message, not the answer.
        let compressed: Option<(Box<dyn Iterator<Item = Item> + Send>, usize)> =
            match (behaviour, qtype) {
                (Behaviour::IxfrDeletions { deletions, .. }, Rtype::IXFR) => Some((
                    Box::new(
                        [Item::Soa(serial), Item::Soa(serial - 1)]
                            .into_iter()
                            .chain((0..deletions).map(Item::Entry))
                            .chain([Item::Soa(serial), Item::Soa(serial)]),
                    ),
                    usize::MAX,
                )),
                // Messages of 100 records: the first few fit the text's margin, and are
                // written before the bound is reached.
                (Behaviour::CutCompressed { records, .. }, Rtype::AXFR) => Some((
                    Box::new(
                        std::iter::once(Item::Soa(serial)).chain((0..records).map(Item::Entry)),
                    ),
                    100,
                )),
                _ => None,
            };
        if let Some((items, per_message)) = compressed {
            let signer = signer.as_mut();
            return send_compressed(&mut stream, &query, signer, items, per_message, &sent).await;
        }
        let entry = |i: u64| {
            let owner = Name::<Vec<u8>>::from_str(&format!("n{i}.{ZONE}")).expect("a name");
            (owner, Ttl::from_secs(60), Cname::new(Name::root_vec()))
        };
        let mut next = 0u64;
        let mut first = true;
        loop {
            let mut answer = MessageBuilder::new_vec()
                .start_answer(&query, domain::base::iana::Rcode::NOERROR)
                .expect("an answer");
            let mut done = false;
            if first {
                answer.push(soa.clone()).expect("room");
            }
            match (behaviour, qtype) {
                (_, Rtype::SOA) | (Behaviour::Condensed { .. }, Rtype::IXFR) => done = true,
                (Behaviour::Flood { .. }, _) => {
                    for _ in 0..50 {
                        let owner = format!("n{next}.{ZONE}");
                        let owner = Name::<Vec<u8>>::from_str(&owner).expect("a name");
                        let text = Txt::<Vec<u8>>::build_from_slice(&[b'x'; 1000]).expect("a text");
                        answer
                            .push((owner, Ttl::from_secs(60), text))
                            .expect("room");
                        next += 1;
                    }
                }
                (Behaviour::Endless { .. }, _) => {
                    for _ in 0..100 {
                        answer.push(entry(next)).expect("room");
                        next += 1;
                    }
                }
                (_, _) => {
                    answer.push(entry(next)).expect("room");
                    next += 1;
                    if next == 3 {
                        answer.push(soa.clone()).expect("room");
                        done = true;
                    }
                }
            }
            let mut additional = answer.additional();
            let unsigned_last =
                matches!(behaviour, Behaviour::UnsignedLast { .. }) && done && qtype != Rtype::SOA;
            if let (Some(signer), false) = (signer.as_mut(), unsigned_last) {
                signer.answer(&mut additional, Time48::now()).expect("room");
            }
            let message = additional.finish();
            if send(&mut stream, &message, &sent).await.is_err() || done {
                return;
            }
            first = false;
        }
    }

    /// Send `message` with its length prefix, counted in `sent`.
    async fn send(stream: &mut TcpStream, message: &[u8], sent: &AtomicU64) -> std::io::Result<()> {
        let mut framed = u16::try_from(message.len())
            .expect("small")
            .to_be_bytes()
            .to_vec();
        framed.extend_from_slice(message);
        stream.write_all(&framed).await?;
        sent.fetch_add(framed.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// A record of a compressed answer.
    #[derive(Clone, Copy)]
    enum Item {
        /// The zone's SOA at this serial.
        Soa(u32),
        /// The entry `n{i}` under [`long_name`], a CNAME to that name.
        Entry(u32),
    }

    /// A name of 249 octets in the zone, `first` its first label: four labels of 56
    /// octets of byte 1, which a zone file writes escaped (`\001`), 4 characters each.
    fn long_name(first: Option<&str>) -> Name<Vec<u8>> {
        let mut wire = Vec::new();
        if let Some(first) = first {
            wire.push(u8::try_from(first.len()).expect("a label"));
            wire.extend_from_slice(first.as_bytes());
        }
        for _ in 0..4 {
            wire.push(56);
            wire.extend_from_slice(&[1; 56]);
        }
        for label in ["hostile", "rpz", ""] {
            wire.push(u8::try_from(label.len()).expect("a label"));
            wire.extend_from_slice(label.as_bytes());
        }
        Name::from_octets(wire).expect("a name")
    }

    /// Send `items` in messages of about 16 KB or `per_message` records, every name
    /// compressed (an entry is 22 bytes on the wire, about 1,850 characters as a line),
    /// each message signed.
    async fn send_compressed(
        stream: &mut TcpStream,
        query: &Message<Vec<u8>>,
        mut signer: Option<&mut tsig::ServerSequence<Arc<tsig::Key>>>,
        items: Box<dyn Iterator<Item = Item> + Send>,
        per_message: usize,
        sent: &AtomicU64,
    ) {
        let zone = Name::<Vec<u8>>::from_str(ZONE).expect("a name");
        let target = long_name(None);
        let mut items = items.peekable();
        while items.peek().is_some() {
            let builder =
                MessageBuilder::from_target(TreeCompressor::new(Vec::new())).expect("room");
            let mut answer = builder
                .start_answer(query, domain::base::iana::Rcode::NOERROR)
                .expect("an answer");
            // Compression pointers reach the first 16 KiB of a message only.
            let mut records = 0;
            while answer.as_slice().len() < 16_000 && records < per_message {
                let Some(item) = items.next() else { break };
                records += 1;
                match item {
                    Item::Soa(serial) => {
                        let soa = Soa::new(
                            zone.clone(),
                            zone.clone(),
                            Serial(serial),
                            Ttl::from_secs(300),
                            Ttl::from_secs(60),
                            Ttl::from_secs(3600),
                            Ttl::from_secs(60),
                        );
                        answer.push((&zone, Ttl::from_secs(60), soa)).expect("room");
                    }
                    Item::Entry(i) => {
                        let owner = long_name(Some(&format!("n{i}")));
                        let cname = Cname::new(target.clone());
                        answer
                            .push((owner, Ttl::from_secs(60), cname))
                            .expect("room");
                    }
                }
            }
            let mut additional = answer.additional();
            if let Some(signer) = signer.as_mut() {
                signer.answer(&mut additional, Time48::now()).expect("room");
            }
            let message = additional.finish().into_target();
            if send(stream, &message, sent).await.is_err() {
                return;
            }
        }
    }
}
