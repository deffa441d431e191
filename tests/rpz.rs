//! RPZ zones kept by zone transfer, end to end: our resolver on real kresd as the secondary
//! of a real Knot DNS primary (knotd in the test bed: TSIG, IXFR from its journal, NOTIFY
//! over TCP) and of a hostile primary written here. Every step waits for what it caused —
//! an event of `/events`, a line of knotd's log — never for time; a listed name is blocked
//! when kresd answers it NXDOMAIN (an RPZ `CNAME .` entry).
//!
//! Also the configuration's `transfer` key as validation sees it (no bed needed).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{Resolver, Setup, DNS_TIMEOUT, START_TIMEOUT};
use kres_config::{validate, PathChecks, ValidationContext};
use serde_json::{json, Value};
use testbed::dns;
use testbed::http::EventStream;
use testbed::knot::{KeySetup, KnotPrimary, PrimarySetup};

const ZONE: &str = "blocklist.rpz.";

/// Names the tests list and check. Not under a special-use TLD such as `.test`: kresd
/// answers every special-use name NXDOMAIN by itself, blocked or not.
const LISTED: &str = "listed.blocked-by-rpz.net";
const NEW: &str = "new.blocked-by-rpz.net";
const KEPT: &str = "kept.blocked-by-rpz.net";

/// The `local-data` section keeping `file` (a bed path) by transfer from `primaries`.
fn rpz_section(file: &Path, primaries: &[String], extra: &str) -> String {
    let primaries: Vec<String> = primaries.iter().map(|p| format!("\"{p}\"")).collect();
    format!(
        "local-data:\n  rpz:\n    - file: {}\n      transfer:\n        zone: {ZONE}\n        primaries: [{}]\n{extra}",
        file.display(),
        primaries.join(", ")
    )
}

/// A knotd primary of `entries` entries, signed with a generated key, sending NOTIFY to
/// `notify` when given.
fn knot_primary(bed: &testbed::Bed, entries: usize, notify: Option<SocketAddr>) -> KnotPrimary {
    KnotPrimary::start(
        bed,
        PrimarySetup {
            zone: ZONE.into(),
            entries,
            key: KeySetup::Generated,
            notify,
        },
    )
    .expect("knotd")
}

/// Whether kresd answers `name` (relative to the root, no final dot) NXDOMAIN, as an RPZ
/// entry of the zone makes it.
fn blocked(r: &Resolver, name: &str) -> bool {
    let absolute = format!("{name}.");
    dns::query_udp(r.dns(), &absolute, dns::TYPE_A, DNS_TIMEOUT).is_ok_and(|resp| resp.rcode == 3)
}

/// [`knot_primary`], its zone at serial 2 with [`LISTED`] added.
fn listed_primary(bed: &testbed::Bed, notify: Option<SocketAddr>) -> KnotPrimary {
    let mut primary = knot_primary(bed, 100, notify);
    assert_eq!(primary.bump(&[LISTED], &[]).expect("bump"), 2);
    primary
}

/// Every event of the log from its first one on (an id not of this resolver resumes from
/// the oldest kept), then the new ones.
fn events(r: &Resolver) -> EventStream {
    EventStream::open(&r.api, "/events", &[("last-event-id", "from-the-start")]).expect("events")
}

/// The next event `wanted` accepts (failing on a stream that ends or stays quiet).
fn wait_event(events: &mut EventStream, r: &Resolver, wanted: impl Fn(&Value) -> bool) -> Value {
    loop {
        let message = events
            .next(START_TIMEOUT)
            .unwrap_or_else(|e| panic!("no event: {e:#}\n{}", r.launched.output.text()))
            .expect("the stream goes on");
        let Ok(data) = serde_json::from_str::<Value>(&message.data) else {
            continue;
        };
        if wanted(&data) {
            return data;
        }
    }
}

fn kind(e: &Value, kind: &str) -> bool {
    e["kind"] == kind
}

/// Wait for the zone's transfer to `serial`, then for the renew it caused to be applied as
/// a rules reset (every worker reopened the rules); the transfer's event.
fn wait_transferred_and_renewed(events: &mut EventStream, r: &Resolver, serial: u32) -> Value {
    let transferred = wait_event(events, r, |e| {
        kind(e, "rpz-transferred") && e["serial"] == serial
    });
    let applied = wait_event(events, r, |e| {
        (kind(e, "config-applied") || kind(e, "config-refused")) && e["cause"] == "renew"
    });
    assert_eq!(applied["kind"], "config-applied", "{applied}");
    assert_eq!(applied["workers"]["action"], "rules-reset", "{applied}");
    transferred
}

/// `GET /rpz`: the one zone kept.
fn rpz_status(r: &Resolver) -> Value {
    let answer = r.http("GET", "/rpz", b"").expect("GET /rpz");
    assert_eq!(answer.status, 200, "{}", answer.text());
    let zones: Value = serde_json::from_slice(&answer.body).expect("JSON");
    assert_eq!(zones.as_array().map(Vec::len), Some(1), "{zones}");
    zones[0].clone()
}

/// A resolver of two workers with `rpz` (its `local-data` section).
fn setup_for(name: &'static str, rpz: String) -> Setup {
    Setup::new(name).workers(2).extra(&rpz)
}

/// A key-file line for the transfer section.
fn key_line(bed_path: &Path) -> String {
    format!("        tsig-key-file: {}\n", bed_path.display())
}

/// Paths of a test's own: a directory with the key and zone files, outside the resolver's.
struct Files {
    dir: testbed::TestDir,
}

impl Files {
    fn new(bed: &testbed::Bed, name: &str) -> Files {
        let dir = bed.test_dir(name).expect("dir");
        std::fs::create_dir_all(dir.host("zones")).expect("zones dir");
        Files { dir }
    }
    fn zone(&self) -> (PathBuf, PathBuf) {
        self.dir.join("zones/blocklist.rpz")
    }
    fn key(&self) -> (PathBuf, PathBuf) {
        self.dir.join("xfr.key")
    }
}

/// A resolver named `name` keeping the zone from `primary` (its key written to a file),
/// with `extra` lines in the transfer section; and the test's files.
fn secondary_of(name: &'static str, primary: &KnotPrimary, extra: &str) -> (Resolver, Files) {
    let bed = testbed::Bed::get().expect("bed");
    let files = Files::new(bed, name);
    let (key_host, key_bed) = files.key();
    primary.write_key_file(&key_host).expect("key file");
    let (_, zone_bed) = files.zone();
    let rpz = rpz_section(
        &zone_bed,
        &[format!("127.0.0.1@{}", primary.port())],
        &format!("{}{extra}", key_line(&key_bed)),
    );
    let r = common::start(&setup_for(name, rpz)).expect("start");
    (r, files)
}

#[test]
fn the_first_transfer_blocks_a_listed_name() {
    let bed = testbed::Bed::get().expect("bed");
    let primary = listed_primary(bed, None);
    let (r, files) = secondary_of("rpz-first", &primary, "");
    let (zone_host, _) = files.zone();
    // No stored file: the start waited for the first transfer, so READY means it serves.
    assert!(zone_host.exists(), "the zone is stored");
    assert!(blocked(&r, LISTED), "a listed name is blocked");
    let mut events = events(&r);
    let transferred = wait_event(&mut events, &r, |e| kind(e, "rpz-transferred"));
    assert_eq!(transferred["transfer"], "axfr", "{transferred}");
    assert_eq!(transferred["serial"], 2);
    assert!(primary.output().text().contains("AXFR, outgoing"));
    wait_event(&mut events, &r, |e| kind(e, "rpz-followed"));
    let status = rpz_status(&r);
    assert_eq!(
        (
            &status["zone"],
            &status["serial"],
            &status["last-transfer"]["result"]
        ),
        (&json!(ZONE), &json!(2), &json!("success")),
        "{status}"
    );
    assert!(status["next-refresh"].is_number(), "{status}");
    // It expires the primary's SOA expire time after the transfer (within the second that
    // passes between the transfer's end and its event).
    let (expires, last_success) = (
        status["expires"].as_f64().expect("an expiry"),
        status["last-success"].as_f64().expect("a last success"),
    );
    let expire = soa_expire(&primary);
    assert!(
        (expires - (last_success + expire)).abs() < 1.0,
        "expires {expires}, last success {last_success}, SOA expire {expire}: {status}"
    );
    let text = r.kresctl(&["rpz"]).expect("kresctl rpz");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("blocklist.rpz.  serial 2"), "{text}");
    assert!(text.contains("axfr from 127.0.0.1"), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("  expires:      in ")),
        "{text}"
    );
    let metrics = r
        .http("GET", "/metrics/prometheus", b"")
        .expect("metrics")
        .text();
    assert!(
        metrics.contains("knot_resolver_rpz_serial{zone=\"blocklist.rpz.\"} 2"),
        "{metrics}"
    );
    // The same instant, as each text writes a float (the last digits may differ).
    let series = gauge(
        &metrics,
        "knot_resolver_rpz_expires_timestamp_seconds{zone=\"blocklist.rpz.\"}",
    )
    .expect("the expiry series");
    assert!(
        (series - expires).abs() < 1e-3,
        "the series ({series}) agrees with /rpz ({expires}): {metrics}"
    );
    r.stop();
}

/// The expire time (seconds) of the SOA `primary` serves, as it answers a query for it.
fn soa_expire(primary: &KnotPrimary) -> f64 {
    let answer = dns::query_udp(primary.addr(), ZONE, dns::TYPE_SOA, DNS_TIMEOUT).expect("the SOA");
    let soa = answer
        .answers
        .iter()
        .find_map(|a| match &a.data {
            dns::RData::Other(rdata) if a.rtype == dns::TYPE_SOA => Some(rdata.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no SOA in {answer:?}"));
    // The RDATA ends with serial, refresh, retry, expire and minimum, 4 bytes each.
    let at = soa.len().checked_sub(8).expect("a SOA's RDATA");
    f64::from(u32::from_be_bytes(
        soa[at..at + 4].try_into().expect("4 bytes"),
    ))
}

/// The value of the sample `series` (name and labels) in the scrape `metrics`.
fn gauge(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok())
}

#[test]
fn a_notify_brings_an_ixfr_and_a_newly_listed_name_is_blocked() {
    let bed = testbed::Bed::get().expect("bed");
    let notify_port = testbed::free_port().expect("port");
    let notify: SocketAddr = format!("127.0.0.1:{notify_port}").parse().expect("address");
    let mut primary = listed_primary(bed, Some(notify));
    let listen = format!("        notify-listen: 127.0.0.1@{notify_port}\n");
    let (r, _files) = secondary_of("rpz-notify", &primary, &listen);
    let workers = r.pids_named("kresd");
    let mut events = events(&r);
    // The listener is up once the zone is followed.
    wait_event(&mut events, &r, |e| kind(e, "rpz-followed"));
    assert!(!blocked(&r, NEW), "not listed yet");
    assert_eq!(primary.bump(&[NEW], &["n7.blocked.zz"]).expect("bump"), 3);
    let notified = wait_event(&mut events, &r, |e| kind(e, "rpz-notified"));
    assert_eq!(notified["zone"], ZONE, "{notified}");
    let transferred = wait_transferred_and_renewed(&mut events, &r, 3);
    assert_eq!(transferred["transfer"], "ixfr", "{transferred}");
    assert!(primary.output().text().contains("IXFR, outgoing"));
    assert!(blocked(&r, NEW), "the new entry is in force");
    assert!(blocked(&r, LISTED), "the others stay");
    assert_eq!(r.pids_named("kresd"), workers, "no worker restarted");
    r.stop();
}

#[test]
fn a_zone_added_at_run_time_is_transferred_and_takes_effect_without_restarts() {
    let bed = testbed::Bed::get().expect("bed");
    let primary = listed_primary(bed, None);
    let files = Files::new(bed, "rpz-added");
    let (key_host, key_bed) = files.key();
    primary.write_key_file(&key_host).expect("key file");
    let (zone_host, zone_bed) = files.zone();
    let r = common::start(&Setup::new("rpz-added").workers(2)).expect("start");
    let workers = r.pids_named("kresd");
    let mut events = events(&r);
    assert!(!blocked(&r, LISTED), "no policy yet");
    // The zone has no stored file yet: the change applies (its rules come with the first
    // transfer), then the first transfer renews the rules.
    let resp = r.put_json(
        "/local-data",
        json!({"rpz": [{"file": zone_bed, "transfer": {
            "zone": ZONE,
            "primaries": [format!("127.0.0.1@{}", primary.port())],
            "tsig-key-file": key_bed,
        }}]}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let applied = wait_event(&mut events, &r, |e| {
        (kind(e, "config-applied") || kind(e, "config-refused")) && e["cause"] == "api"
    });
    assert_eq!(applied["kind"], "config-applied", "{applied}");
    assert_eq!(applied["workers"]["action"], "rules-reset", "{applied}");
    let transferred = wait_transferred_and_renewed(&mut events, &r, 2);
    assert_eq!(transferred["transfer"], "axfr", "{transferred}");
    assert!(zone_host.exists(), "the zone is stored");
    assert!(blocked(&r, LISTED), "a listed name is blocked");
    assert_eq!(r.pids_named("kresd"), workers, "no worker restarted");
    r.stop();
}

#[test]
fn entries_sharing_a_notify_address_are_told_apart_by_their_zone() {
    let bed = testbed::Bed::get().expect("bed");
    let files = Files::new(bed, "rpz-shared-notify");
    let notify_port = testbed::free_port().expect("port");
    let notify = SocketAddr::from(([127, 0, 0, 1], notify_port));
    let zones = ["first.rpz.", "second.rpz."];
    let mut primaries: Vec<KnotPrimary> = zones
        .iter()
        .map(|zone| {
            let setup = PrimarySetup {
                zone: (*zone).into(),
                entries: 10,
                key: KeySetup::Generated,
                notify: Some(notify),
            };
            KnotPrimary::start(bed, setup).expect("knotd")
        })
        .collect();
    // Each entry with its own key: a NOTIFY is checked with the key of the zone it names.
    let mut local = String::from("local-data:\n  rpz:\n");
    for (i, primary) in primaries.iter().enumerate() {
        let (key_host, key_bed) = files.dir.join(&format!("{i}.key"));
        primary.write_key_file(&key_host).expect("key file");
        let (_, zone_bed) = files.dir.join(&format!("zones/{i}.rpz"));
        local.push_str(&format!(
            "    - file: {}\n      transfer:\n        zone: {}\n        primaries: [\"127.0.0.1@{}\"]\n        tsig-key-file: {}\n        notify-listen: 127.0.0.1@{notify_port}\n",
            zone_bed.display(),
            primary.zone(),
            primary.port(),
            key_bed.display()
        ));
    }
    let r = common::start(&setup_for("rpz-shared-notify", local)).expect("start");
    let mut events = events(&r);
    for _ in &zones {
        wait_event(&mut events, &r, |e| kind(e, "rpz-followed"));
    }
    primaries[1]
        .bump(&["second-only.blocked-by-rpz.net"], &[])
        .expect("bump");
    let notified = wait_event(&mut events, &r, |e| kind(e, "rpz-notified"));
    assert_eq!(notified["zone"], "second.rpz.", "{notified}");
    let transferred = wait_transferred_and_renewed(&mut events, &r, 2);
    assert_eq!(transferred["zone"], "second.rpz.", "{transferred}");
    assert!(blocked(&r, "second-only.blocked-by-rpz.net"));
    let status: Value =
        serde_json::from_slice(&r.http("GET", "/rpz", b"").expect("GET").body).expect("JSON");
    let serials: Vec<(&Value, &Value)> = status
        .as_array()
        .expect("zones")
        .iter()
        .map(|z| (&z["zone"], &z["serial"]))
        .collect();
    assert_eq!(
        serials,
        [
            (&json!("first.rpz."), &json!(1)),
            (&json!("second.rpz."), &json!(2))
        ]
    );
    r.stop();
}

/// The label listing `byte`: `b`, its hex, the byte, `x` (distinct for every byte, also
/// where DNS ignores case).
fn byte_label(byte: u8) -> Vec<u8> {
    let mut label = format!("b{byte:02x}").into_bytes();
    label.extend_from_slice(&[byte, b'x']);
    label
}

/// The entry of `byte` as knotd's zone file writes it, relative to the zone (every byte of
/// the label as `\DDD`).
fn byte_entry(byte: u8) -> String {
    let label: String = byte_label(byte)
        .iter()
        .map(|b| format!("\\{b:03}"))
        .collect();
    format!("{label}.{BYTES_BELOW}")
}

/// Where the entries of [`byte_entry`] are.
const BYTES_BELOW: &str = "bytes.blocked-by-rpz.net";

/// The rcode kresd answers for the entry of `byte`, asked in wire form (`u8::MAX` for none).
fn rcode_of_byte(r: &Resolver, byte: u8) -> u8 {
    let label = byte_label(byte);
    let name = dns::wire_name(&[&label, b"bytes", b"blocked-by-rpz", b"net"]).expect("a name");
    dns::query_udp_wire(r.dns(), &name, dns::TYPE_A, DNS_TIMEOUT).map_or(u8::MAX, |a| a.rcode)
}

#[test]
fn a_name_with_any_byte_is_stored_read_by_kresd_and_blocked() {
    let bed = testbed::Bed::get().expect("bed");
    let notify_port = testbed::free_port().expect("port");
    let notify = SocketAddr::from(([127, 0, 0, 1], notify_port));
    let mut primary = knot_primary(bed, 10, Some(notify));
    let entries: Vec<String> = (0..=255u8).map(byte_entry).collect();
    let entries: Vec<&str> = entries.iter().map(String::as_str).collect();
    assert_eq!(primary.bump(&entries, &[]).expect("bump"), 2);
    let listen = format!("        notify-listen: 127.0.0.1@{notify_port}\n");
    let (r, files) = secondary_of("rpz-every-byte", &primary, &listen);
    let (zone_host, _) = files.zone();
    let stored = std::fs::read_to_string(&zone_host).expect("the stored zone");
    assert!(
        stored.contains("\nb21\\033x.bytes.blocked-by-rpz.net.blocklist.rpz. 3600 IN CNAME .\n"),
        "'!' is written as \\033:\n{stored}"
    );
    // kresd's rules hold no name with a zero byte: its loader reads the entry and skips it,
    // as it says; every other byte is blocked as the feed says.
    let output = r.launched.output.text();
    assert!(
        output.contains("skipping zero-containing RR owner name"),
        "{output}"
    );
    assert!(!output.contains("error parsing zone file"), "{output}");
    let unblocked: Vec<u8> = (1..=255u8)
        .filter(|byte| rcode_of_byte(&r, *byte) != dns::RCODE_NXDOMAIN)
        .collect();
    assert_eq!(unblocked, [0u8; 0], "bytes whose entry is not in force");
    assert!(!blocked(&r, "b21-x.bytes.blocked-by-rpz.net"), "not listed");

    // Entries of special bytes leave by IXFR: the stored lines are read back and deleted.
    let mut events = events(&r);
    wait_event(&mut events, &r, |e| kind(e, "rpz-followed"));
    let leaving = [b'!', b' ', b'.', b'"', b'\\', b';', 0xff, 0x7f];
    let removed: Vec<String> = leaving.iter().map(|b| byte_entry(*b)).collect();
    let removed: Vec<&str> = removed.iter().map(String::as_str).collect();
    assert_eq!(primary.bump(&[], &removed).expect("bump"), 3);
    let transferred = wait_transferred_and_renewed(&mut events, &r, 3);
    assert_eq!(transferred["transfer"], "ixfr", "{transferred}");
    for byte in leaving {
        assert_ne!(
            rcode_of_byte(&r, byte),
            dns::RCODE_NXDOMAIN,
            "byte {byte} left"
        );
    }
    assert_eq!(
        rcode_of_byte(&r, b'#'),
        dns::RCODE_NXDOMAIN,
        "the others stay"
    );
    r.stop();
}

/// Rewrite the primary's zone with `serial`, the SOA's refresh and retry at 1 s, and
/// `added` entries; knotd loads it (no NOTIFY is configured).
fn republish(primary: &KnotPrimary, serial: u32, added: &[&str]) {
    let path = primary.zone_file();
    let old = std::fs::read_to_string(&path).expect("zone file");
    let mut lines = old.lines();
    let soa: Vec<&str> = lines.next().expect("the SOA").split_whitespace().collect();
    // owner ttl IN SOA mname rname serial refresh retry expire minimum
    let mut text = format!(
        "{} {} IN SOA {} {} {serial} 1 1 86400 60\n",
        soa[0], soa[1], soa[4], soa[5]
    );
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    for name in added {
        text.push_str(&format!("{name}.{ZONE} 3600 IN CNAME .\n"));
    }
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, &path).expect("rename");
    primary.knotc(&["zone-reload", ZONE]).expect("reload");
    primary
        .output()
        .wait_for(&format!("-> {serial}, "), START_TIMEOUT)
        .expect("knotd loaded the change");
}

#[test]
fn the_soa_refresh_brings_a_change_without_notify() {
    let bed = testbed::Bed::get().expect("bed");
    let primary = knot_primary(bed, 50, None);
    // A refresh of 1 s from the first transfer on: held to the pacing's interval.
    republish(&primary, 2, &[]);
    let (r, _files) = secondary_of("rpz-refresh", &primary, "");
    let mut events = events(&r);
    let first = wait_event(&mut events, &r, |e| kind(e, "rpz-transferred"));
    assert_eq!(first["serial"], 2);
    assert!(
        first["next-refresh"]
            .as_f64()
            .is_some_and(|s| s <= INTERVAL.as_secs_f64()),
        "{first}"
    );
    republish(&primary, 3, &[NEW]);
    let transferred = wait_transferred_and_renewed(&mut events, &r, 3);
    assert_eq!(transferred["transfer"], "ixfr", "{transferred}");
    assert!(blocked(&r, NEW));
    assert!(
        !primary.output().text().contains("notify, outgoing"),
        "no NOTIFY was involved"
    );
    r.stop();
}

#[test]
fn a_wrong_key_is_refused_while_the_old_policy_serves() {
    let bed = testbed::Bed::get().expect("bed");
    let primary = listed_primary(bed, None);
    let (r, files) = secondary_of("rpz-wrong-key", &primary, "");
    assert!(blocked(&r, LISTED));
    let mut events = events(&r);
    wait_event(&mut events, &r, |e| kind(e, "rpz-followed"));
    // The same key name with another secret: the primary's signatures do not verify.
    let (wrong_host, wrong_bed) = files.dir.join("wrong.key");
    let wrong = primary.key_file_text().expect("a key").replace(
        primary.secret().expect("a secret"),
        &testbed::knot::base64(&[7u8; 32]),
    );
    testbed::write(&wrong_host, &wrong).expect("wrong key");
    let answer = r.put_json(
        "/local-data/rpz/0/transfer/tsig-key-file",
        json!(wrong_bed.display().to_string()),
    );
    assert!(answer.status < 300, "{}", answer.text());
    let refused = wait_event(&mut events, &r, |e| kind(e, "rpz-transfer-failed"));
    eprintln!("wrong key: {refused}");
    assert!(
        ["tsig", "refused"].contains(&refused["reason"].as_str().unwrap_or("")),
        "{refused}"
    );
    assert!(blocked(&r, LISTED), "the old policy serves");
    let status = rpz_status(&r);
    assert_eq!(status["serial"], 2, "{status}");
    assert_ne!(status["last-transfer"]["result"], "success", "{status}");
    let metrics = r
        .http("GET", "/metrics/prometheus", b"")
        .expect("metrics")
        .text();
    assert!(
        metrics.contains(&format!(
            "knot_resolver_rpz_transfers_total{{zone=\"{ZONE}\",kind=\"ixfr\",result=\"{}\"}} 1",
            refused["reason"].as_str().unwrap_or("")
        )),
        "{metrics}"
    );
    r.stop();
}

/// A stored zone of `names`, with `serial`, as the secondary keeps it.
fn stored_zone(path: &Path, serial: u32, names: &[&str]) {
    stored_zone_with_timers(path, serial, "300 60 86400", names);
}

/// The same with the SOA's `refresh retry expire`.
fn stored_zone_with_timers(path: &Path, serial: u32, timers: &str, names: &[&str]) {
    let mut text =
        format!("{ZONE} 3600 IN SOA primary.{ZONE} hostmaster.{ZONE} {serial} {timers} 60\n");
    for name in names {
        text.push_str(&format!("{name}.{ZONE} 3600 IN CNAME .\n"));
    }
    testbed::write(path, &text).expect("stored zone");
}

/// A resolver named `name` keeping the zone stored at `zone_bed` (a bed path) from a
/// primary that nobody runs.
fn secondary_without_primary(name: &'static str, zone_bed: &Path) -> Resolver {
    let nobody = testbed::free_port().expect("port");
    let rpz = rpz_section(zone_bed, &[format!("127.0.0.1@{nobody}")], "");
    common::start(&setup_for(name, rpz)).expect("start")
}

/// The stored zone of [`stored_zone`] with [`KEPT`] is untouched and serves.
fn assert_stored_policy_kept(r: &Resolver, zone_host: &Path) {
    assert!(blocked(r, KEPT), "the stored policy serves");
    let stored = std::fs::read_to_string(zone_host).expect("stored");
    assert_eq!(stored.lines().count(), 2, "the stored file is untouched");
}

#[test]
fn a_warm_start_needs_no_primary() {
    let bed = testbed::Bed::get().expect("bed");
    let files = Files::new(bed, "rpz-warm");
    let (zone_host, zone_bed) = files.zone();
    stored_zone(&zone_host, 41, &[KEPT]);
    // Nothing listens there.
    let r = secondary_without_primary("rpz-warm", &zone_bed);
    assert!(blocked(&r, KEPT), "the stored zone serves");
    let mut events = events(&r);
    let followed = wait_event(&mut events, &r, |e| kind(e, "rpz-followed"));
    assert_eq!(followed["serial"], 41, "{followed}");
    let failed = wait_event(&mut events, &r, |e| kind(e, "rpz-transfer-failed"));
    assert!(failed["next-refresh"].is_number(), "{failed}");
    assert_stored_policy_kept(&r, &zone_host);
    r.stop();
}

#[test]
fn an_expired_zone_is_still_served_and_said_to_be_expired() {
    let bed = testbed::Bed::get().expect("bed");
    let files = Files::new(bed, "rpz-expired");
    let (zone_host, zone_bed) = files.zone();
    // Retried every second, expired 2 s after the start without a successful refresh.
    stored_zone_with_timers(&zone_host, 5, "1 1 2", &[KEPT]);
    let r = secondary_without_primary("rpz-expired", &zone_bed);
    let mut events = events(&r);
    let expired = wait_event(&mut events, &r, |e| kind(e, "rpz-expired"));
    assert_eq!(
        (&expired["zone"], &expired["serial"]),
        (&json!(ZONE), &json!(5))
    );
    assert!(
        r.launched.output.text().contains("RPZ zone expired"),
        "a warning in the log"
    );
    assert_stored_policy_kept(&r, &zone_host);
    assert_eq!(rpz_status(&r)["expired"], true);
    let metrics = r
        .http("GET", "/metrics/prometheus", b"")
        .expect("metrics")
        .text();
    assert!(
        metrics.contains(&format!("knot_resolver_rpz_expired{{zone=\"{ZONE}\"}} 1")),
        "{metrics}"
    );
    r.stop();
}

#[test]
fn a_zone_stored_past_its_expire_time_is_expired_at_once() {
    let bed = testbed::Bed::get().expect("bed");
    let files = Files::new(bed, "rpz-stale");
    let (zone_host, zone_bed) = files.zone();
    // Expired an hour after its last refresh, which was two hours ago: a start (of the
    // resolver, or of the manager) does not make it younger.
    stored_zone_with_timers(&zone_host, 9, "1 1 3600", &[KEPT]);
    let two_hours_ago = std::time::SystemTime::now() - Duration::from_secs(7200);
    std::fs::File::options()
        .append(true)
        .open(&zone_host)
        .and_then(|f| f.set_modified(two_hours_ago))
        .expect("set the stored zone's time");
    let r = secondary_without_primary("rpz-stale", &zone_bed);
    let mut events = events(&r);
    let expired = wait_event(&mut events, &r, |e| kind(e, "rpz-expired"));
    assert_eq!(expired["serial"], 9, "{expired}");
    assert_stored_policy_kept(&r, &zone_host);
    // Its expiry is told as the past it is: an hour after the file's time.
    let status = rpz_status(&r);
    let expected = two_hours_ago
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
        + 3600.0;
    let expires = status["expires"].as_f64().expect("an expiry");
    assert!((expires - expected).abs() < 1.0, "{expected}: {status}");
    r.stop();
}

#[test]
fn a_cold_start_with_no_primary_is_a_clear_error() {
    let bed = testbed::Bed::get().expect("bed");
    let files = Files::new(bed, "rpz-cold-fail");
    let (_, zone_bed) = files.zone();
    let nobody = testbed::free_port().expect("port");
    let rpz = rpz_section(
        &zone_bed,
        &[format!("127.0.0.1@{nobody}")],
        "        first-transfer-timeout: 2s\n",
    );
    let mut r = common::launch(&setup_for("rpz-cold-fail", rpz)).expect("launch");
    let status = r.launched.wait(START_TIMEOUT).expect("the resolver ends");
    assert_eq!(status.code(), Some(1));
    let output = r.launched.output.text();
    assert!(
        output.contains(&format!("RPZ zone {ZONE} has no stored file"))
            && output.contains(&format!("127.0.0.1:{nobody}")),
        "{output}"
    );
    assert!(r.notify.wait_for("READY=1", Duration::ZERO).is_err());
}

/// A stored zone of the entry kept by transfer that kresd cannot read: its SOA at `serial`,
/// then [`KEPT`], then a name as an older writer left it (`!` unescaped), which kresd's zone
/// reader refuses ("invalid domain name character").
fn broken_zone(path: &Path, serial: u32) {
    let text = format!(
        "; zone transfer, one record per line:\n\
         {ZONE} 3600 IN SOA primary.{ZONE} hostmaster.{ZONE} {serial} 300 60 86400 60\n\
         {KEPT}.{ZONE} 3600 IN CNAME .\n\
         evil!name.blocked-by-rpz.net.{ZONE} 3600 IN CNAME .\n"
    );
    testbed::write(path, &text).expect("stored zone");
}

/// A rule beside the RPZ: the rest of the policy.
const RULED: &str = "ruled.blocked-by-rpz.net";

/// The change or renew `cause` asked for is applied (not refused).
fn wait_applied(events: &mut EventStream, r: &Resolver, cause: &str) {
    let outcome = wait_event(events, r, |e| {
        (kind(e, "config-applied") || kind(e, "config-refused")) && e["cause"] == cause
    });
    assert_eq!(outcome["kind"], "config-applied", "{outcome}");
}

#[test]
fn a_stored_zone_kresd_cannot_load_is_left_out_and_repaired_by_a_whole_transfer() {
    let bed = testbed::Bed::get().expect("bed");
    // The primary serves the stored serial: only a whole transfer, asked for because the
    // stored file cannot be loaded, replaces it.
    let primary = listed_primary(bed, None);
    let files = Files::new(bed, "rpz-broken");
    let (key_host, key_bed) = files.key();
    primary.write_key_file(&key_host).expect("key file");
    let (zone_host, zone_bed) = files.zone();
    broken_zone(&zone_host, 2);
    // First from a primary nobody runs: the zone stays broken while the resolver is watched.
    let nobody = testbed::free_port().expect("port");
    let local = format!(
        "local-data:\n  rules:\n    - name: [{RULED}]\n      subtree: nxdomain\n  rpz:\n    \
         - file: {}\n      transfer:\n        zone: {ZONE}\n        primaries: [\"127.0.0.1@{nobody}\"]\n{}",
        zone_bed.display(),
        key_line(&key_bed)
    );
    let mut r = common::start(&setup_for("rpz-broken", local)).expect("the resolver starts");
    let mut events = events(&r);
    let broken = wait_event(&mut events, &r, |e| kind(e, "rpz-zone-broken"));
    assert_eq!(broken["zone"], ZONE, "{broken}");
    let reason = broken["reason"].as_str().expect("a reason");
    assert!(reason.contains("line 4"), "{broken}");
    // The rest of the policy is in force; the zone is left out whole, never in part.
    assert!(blocked(&r, RULED), "the rule beside the zone is in force");
    assert!(!blocked(&r, KEPT), "nothing of the broken zone is loaded");
    let failed = wait_event(&mut events, &r, |e| kind(e, "rpz-transfer-failed"));
    assert_eq!(
        failed["transfer"], "axfr",
        "a whole transfer is asked for: {failed}"
    );
    // Reported everywhere.
    let status = rpz_status(&r);
    assert!(
        status["broken"]
            .as_str()
            .is_some_and(|b| b.contains("line 4")),
        "{status}"
    );
    let text = r.kresctl(&["rpz"]).expect("kresctl rpz");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("BROKEN:       kresd cannot load the stored zone"),
        "{text}"
    );
    let metrics = r
        .http("GET", "/metrics/prometheus", b"")
        .expect("metrics")
        .text();
    let gauge = format!("knot_resolver_rpz_broken{{zone=\"{ZONE}\"}} 1");
    assert!(metrics.contains(&gauge), "{metrics}");
    let status_line = "STATUS=Ready: 2 workers configured";
    let broken_line = format!("{status_line}; RPZ zone {ZONE} cannot be loaded, see `kresctl rpz`");
    r.notify
        .wait_for(&broken_line, Duration::ZERO)
        .expect("the status line names the zone");
    // Renews, reloads and changes go on.
    let renew = r.http("POST", "/renew", b"").expect("renew");
    assert_eq!(renew.status, 200, "{}", renew.text());
    wait_applied(&mut events, &r, "renew");
    let reload = r.http("POST", "/reload", b"").expect("reload");
    assert_eq!(reload.status, 200, "{}", reload.text());
    wait_applied(&mut events, &r, "reload");
    // The change that names the running primary: the zone is transferred whole at once and
    // loaded.
    let primaries = json!([format!("127.0.0.1@{}", primary.port())]);
    let resp = r.put_json("/local-data/rpz/0/transfer/primaries", primaries);
    assert_eq!(resp.status, 200, "{}", resp.text());
    wait_applied(&mut events, &r, "api");
    let transferred = wait_event(&mut events, &r, |e| kind(e, "rpz-transferred"));
    assert_eq!(
        (&transferred["transfer"], &transferred["serial"]),
        (&json!("axfr"), &json!(2)),
        "{transferred}"
    );
    // The renew it caused loads the zone.
    let loaded = wait_event(&mut events, &r, |e| kind(e, "rpz-zone-loaded"));
    assert_eq!(loaded["zone"], ZONE, "{loaded}");
    wait_applied(&mut events, &r, "renew");
    assert!(blocked(&r, LISTED), "the transferred zone is in force");
    assert!(blocked(&r, RULED), "and the rest of the policy");
    assert_eq!(rpz_status(&r)["broken"], Value::Null);
    r.notify
        .wait_for(status_line, START_TIMEOUT)
        .expect("the status line no longer names it");
    let metrics = r
        .http("GET", "/metrics/prometheus", b"")
        .expect("metrics")
        .text();
    let gauge = format!("knot_resolver_rpz_broken{{zone=\"{ZONE}\"}} 0");
    assert!(metrics.contains(&gauge), "{metrics}");
    let stored = std::fs::read_to_string(&zone_host).expect("stored");
    assert!(!stored.contains("evil!name"), "{stored}");
    r.stop();
}

/// How the hostile primary misbehaves.
#[derive(Clone, Copy, Debug)]
enum Misbehaviour {
    /// SOA serial 100, and a transfer that never ends.
    Endless,
    /// SOA serial 1: older than any stored zone of these tests.
    SerialBack,
    /// Every answer is its query's id followed by bytes that are no DNS message.
    Garbage,
    /// SOA serial 100, and a zone holding a record kresd's zone reader cannot take (SPF
    /// with empty data).
    Unstorable,
}

impl Misbehaviour {
    /// What it answers `msg` (a query) with: the messages of one answer.
    fn answers(self, msg: &[u8]) -> Vec<Vec<u8>> {
        let Some((query, qtype)) = question(msg) else {
            return Vec::new();
        };
        match self {
            Misbehaviour::Garbage => {
                let mut junk = query[..2].to_vec();
                junk.extend_from_slice(&[0xff; 40]);
                vec![junk]
            }
            Misbehaviour::SerialBack => vec![answer(query, &[soa_record(1)])],
            Misbehaviour::Unstorable if qtype == 252 => {
                // The apex (a pointer to the question's name), SPF, IN, TTL 3600, no data.
                let empty_spf = vec![0xC0, 12, 0, 99, 0, 1, 0, 0, 14, 16, 0, 0];
                vec![answer(
                    query,
                    &[soa_record(100), empty_spf, soa_record(100)],
                )]
            }
            Misbehaviour::Unstorable => vec![answer(query, &[soa_record(100)])],
            Misbehaviour::Endless => vec![answer(query, &[soa_record(100)])],
        }
        .into_iter()
        // The endless transfer goes on after its first message.
        .chain(
            (matches!(self, Misbehaviour::Endless) && (qtype == 251 || qtype == 252))
                .then(Vec::new),
        )
        .collect()
    }
}

/// A hostile primary on `127.0.0.1`, UDP and TCP; `served` counts the bytes sent over TCP.
struct HostilePrimary {
    port: u16,
    served: Arc<std::sync::atomic::AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl HostilePrimary {
    fn start(how: Misbehaviour) -> HostilePrimary {
        let tcp = TcpListener::bind("127.0.0.1:0").expect("tcp");
        let port = tcp.local_addr().expect("address").port();
        let udp = UdpSocket::bind(("127.0.0.1", port)).expect("udp");
        let served = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        udp.set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        tcp.set_nonblocking(true).expect("nonblocking");
        let udp_stop = stop.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while !udp_stop.load(Ordering::SeqCst) {
                if let Ok((n, from)) = udp.recv_from(&mut buf) {
                    if let Some(first) = how.answers(&buf[..n]).first() {
                        let _ = udp.send_to(first, from);
                    }
                }
            }
        });
        let (tcp_stop, tcp_served) = (stop.clone(), served.clone());
        std::thread::spawn(move || {
            while !tcp_stop.load(Ordering::SeqCst) {
                match tcp.accept() {
                    Ok((conn, _)) => {
                        let (stop, served) = (tcp_stop.clone(), tcp_served.clone());
                        std::thread::spawn(move || serve_tcp(conn, how, &stop, &served));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        HostilePrimary { port, served, stop }
    }
}

impl Drop for HostilePrimary {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The query's header-and-question bytes and its type.
fn question(msg: &[u8]) -> Option<(&[u8], u16)> {
    let mut at = 12;
    while *msg.get(at)? != 0 {
        at += 1 + usize::from(*msg.get(at)?);
    }
    let qtype = u16::from_be_bytes([*msg.get(at + 1)?, *msg.get(at + 2)?]);
    Some((msg.get(..at + 5)?, qtype))
}

/// An answer to `query` (header and question) with `records` (each already encoded).
fn answer(query: &[u8], records: &[Vec<u8>]) -> Vec<u8> {
    let mut out = query.to_vec();
    out[2] = 0x84; // QR, AA
    out[3] = 0;
    out[6..8].copy_from_slice(&(records.len() as u16).to_be_bytes());
    out[8..12].fill(0);
    for r in records {
        out.extend_from_slice(r);
    }
    out
}

/// The zone's SOA with `serial`, owner by a pointer to the question's name.
fn soa_record(serial: u32) -> Vec<u8> {
    let mut r = vec![0xC0, 12, 0, 6, 0, 1, 0, 0, 14, 16];
    let mut rdata = vec![0, 0]; // mname ".", rname "."
    for v in [serial, 300, 60, 86400, 60] {
        rdata.extend_from_slice(&v.to_be_bytes());
    }
    r.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    r.extend_from_slice(&rdata);
    r
}

/// Entry `i` of the endless zone: `e{i}.<zone> CNAME .`.
fn entry_record(i: u64) -> Vec<u8> {
    let label = format!("e{i}");
    let mut r = vec![label.len() as u8];
    r.extend_from_slice(label.as_bytes());
    r.extend_from_slice(&[0xC0, 12, 0, 5, 0, 1, 0, 0, 14, 16, 0, 1, 0]);
    r
}

/// Answer queries on one connection as `how` says; a transfer (an empty message after the
/// first in [`Misbehaviour::answers`]) goes on with entries until `stop`.
fn serve_tcp(
    mut conn: std::net::TcpStream,
    how: Misbehaviour,
    stop: &AtomicBool,
    served: &std::sync::atomic::AtomicU64,
) {
    let _ = conn.set_nonblocking(false);
    let mut next = 0u64;
    loop {
        let mut len = [0u8; 2];
        if conn.read_exact(&mut len).is_err() {
            return;
        }
        let mut msg = vec![0u8; usize::from(u16::from_be_bytes(len))];
        if conn.read_exact(&mut msg).is_err() {
            return;
        }
        let mut send = |m: &[u8]| -> bool {
            let mut framed = (m.len() as u16).to_be_bytes().to_vec();
            framed.extend_from_slice(m);
            served.fetch_add(framed.len() as u64, Ordering::SeqCst);
            conn.write_all(&framed).is_ok()
        };
        let answers = how.answers(&msg);
        let Some(first) = answers.first() else { return };
        if !send(first) {
            return;
        }
        if answers.len() < 2 {
            continue;
        }
        let Some((query, _)) = question(&msg) else {
            return;
        };
        while !stop.load(Ordering::SeqCst) {
            let records: Vec<Vec<u8>> = (0..2000).map(|k| entry_record(next + k)).collect();
            next += 2000;
            if !send(&answer(query, &records)) {
                return;
            }
        }
    }
}

/// A memory figure of `/proc/PID/status` (`VmRSS:`, `VmHWM:`), in KiB.
fn memory_kib(pid: i32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a memory figure")
}

#[test]
fn an_endless_transfer_is_cut_at_its_bound_and_the_manager_memory_stays_bounded() {
    let bed = testbed::Bed::get().expect("bed");
    let files = Files::new(bed, "rpz-endless");
    let (zone_host, zone_bed) = files.zone();
    stored_zone(&zone_host, 1, &[KEPT]);
    let hostile = HostilePrimary::start(Misbehaviour::Endless);
    // Cut at 32 MiB: a secondary holding the transfer in memory would grow by that much.
    let rpz = rpz_section(
        &zone_bed,
        &[format!("127.0.0.1@{}", hostile.port)],
        "        max-size: 32M\n",
    );
    let r = common::start(&setup_for("rpz-endless", rpz)).expect("start");
    let manager = r.pids_named("kres-manager");
    let manager = *manager.first().expect("the manager process");
    let before = memory_kib(manager, "VmHWM:");
    let mut events = events(&r);
    let failed = wait_event(&mut events, &r, |e| kind(e, "rpz-transfer-failed"));
    assert_eq!(failed["reason"], "too-large", "{failed}");
    let served = hostile.served.load(Ordering::SeqCst);
    assert!(
        served >= 32 << 20,
        "the stream ran to the bound: {served} bytes"
    );
    let peak = memory_kib(manager, "VmHWM:");
    eprintln!(
        "endless transfer: {served} bytes served, cut; manager peak {before} KiB -> {peak} KiB"
    );
    assert!(
        peak < before + 16 * 1024,
        "the manager's peak memory grew from {before} KiB to {peak} KiB over a {served}-byte transfer"
    );
    assert_stored_policy_kept(&r, &zone_host);
    r.stop();
}

#[test]
fn garbage_and_a_serial_going_back_keep_the_stored_policy() {
    let bed = testbed::Bed::get().expect("bed");
    for (how, reason) in [
        (Misbehaviour::SerialBack, "serial-backwards"),
        (Misbehaviour::Garbage, "malformed"),
        (Misbehaviour::Unstorable, "unstorable"),
    ] {
        let files = Files::new(bed, "rpz-hostile");
        let (zone_host, zone_bed) = files.zone();
        stored_zone(&zone_host, 5, &[KEPT]);
        let hostile = HostilePrimary::start(how);
        let rpz = rpz_section(&zone_bed, &[format!("127.0.0.1@{}", hostile.port)], "");
        let r = common::start(&setup_for("rpz-hostile", rpz)).expect("start");
        let mut events = events(&r);
        let failed = wait_event(&mut events, &r, |e| kind(e, "rpz-transfer-failed"));
        assert_eq!(failed["reason"], reason, "{how:?}: {failed}");
        let status = rpz_status(&r);
        assert_eq!(
            status["last-transfer"]["result"], reason,
            "{how:?}: {status}"
        );
        assert_stored_policy_kept(&r, &zone_host);
        r.stop();
    }
}

/// Validation of the `transfer` key, strict (as the daemon and `kresctl validate --strict`):
/// the errors under `/local-data`.
fn strict_errors(dir: &Path, json: &str) -> Vec<(String, String)> {
    let raw: Value = serde_json::from_str(json).expect("document");
    let ctx = ValidationContext {
        resolve_root: dir.to_owned(),
        checks: PathChecks::Strict,
        logtarget_arg: Default::default(),
    };
    match validate(&raw, &ctx) {
        Ok(_) => Vec::new(),
        // The machine's own paths (rundir, cache) are not this test's concern.
        Err(errors) => errors
            .0
            .into_iter()
            .filter(|e| e.path.starts_with("/local-data"))
            .map(|e| (e.path, e.message))
            .collect(),
    }
}

#[test]
fn the_transfer_key_is_validated_where_it_is_written() {
    let dir = std::env::temp_dir().join(format!("kres-rpz-validate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let good_key = dir.join("good.key");
    std::fs::write(
        &good_key,
        "key \"xfr\" {\n\talgorithm hmac-sha256;\n\tsecret \"c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0\";\n};\n",
    )
    .expect("key");
    let bad_key = dir.join("bad.key");
    std::fs::write(&bad_key, "key \"xfr\" { algorithm hmac-md5; };\n").expect("key");
    // Secrets a lenient decoder would have read as another key: `=` in the middle, and a last
    // character with bits beyond the last byte.
    let padded_inside = dir.join("padded-inside.key");
    std::fs::write(
        &padded_inside,
        "key \"xfr\" {\n\talgorithm hmac-sha256;\n\tsecret \"c2Vj=cmV0\";\n};\n",
    )
    .expect("key");
    let trailing_bits = dir.join("trailing-bits.key");
    std::fs::write(
        &trailing_bits,
        "key \"xfr\" {\n\talgorithm hmac-sha256;\n\tsecret \"c2VjcmV0cx==\";\n};\n",
    )
    .expect("key");
    let doc = |file: &str, transfer: Value| {
        json!({"rundir": dir, "local-data": {"rpz": [{"file": file, "transfer": transfer}]}})
            .to_string()
    };
    let new_file = dir.join("not-yet.rpz").display().to_string();
    let good = json!({"zone": "blocklist.rpz.", "primaries": ["192.0.2.53", "2001:db8::53@5353"],
                      "tsig-key-file": good_key, "notify-listen": "127.0.0.1@5354"});
    assert_eq!(
        strict_errors(&dir, &doc(&new_file, good.clone())),
        vec![],
        "a file to be"
    );
    let with = |key: &str, value: Value| {
        let mut t = good.clone();
        t[key] = value;
        t
    };
    let rows = [
        (
            doc(
                &new_file,
                with("primaries", json!(["192.0.2.53", "192.0.2.300"])),
            ),
            "/local-data/rpz/0/transfer/primaries/1",
            "192.0.2.300",
        ),
        (
            doc(&new_file, with("notify-listen", json!("127.0.0.1@70000"))),
            "/local-data/rpz/0/transfer/notify-listen",
            "70000",
        ),
        (
            doc(&new_file, with("zone", json!("bad..zone"))),
            "/local-data/rpz/0/transfer/zone",
            "bad..zone",
        ),
        (
            doc(&new_file, with("tsig-key-file", json!(bad_key))),
            "/local-data/rpz/0/transfer/tsig-key-file",
            "malformed key file",
        ),
        (
            doc(&new_file, with("tsig-key-file", json!(padded_inside))),
            "/local-data/rpz/0/transfer/tsig-key-file",
            "line 3: the secret is not valid base64 (character 4 is not in the base64 alphabet",
        ),
        (
            doc(&new_file, with("tsig-key-file", json!(trailing_bits))),
            "/local-data/rpz/0/transfer/tsig-key-file",
            "line 3: the secret is not valid base64 (its last character carries bits",
        ),
        (
            doc(
                &new_file,
                with("tsig-key-file", json!(dir.join("none.key"))),
            ),
            "/local-data/rpz/0/transfer/tsig-key-file",
            "does not exist",
        ),
        (
            doc(&new_file, with("primaries", json!([]))),
            "/local-data/rpz/0/transfer/primaries",
            "empty list",
        ),
        (
            doc("/nonexistent-dir/blocklist.rpz", good.clone()),
            "/local-data/rpz/0/file",
            "existing directory",
        ),
    ];
    for (document, path, says) in rows {
        let errors = strict_errors(&dir, &document);
        assert!(
            errors.iter().any(|(p, m)| p == path && m.contains(says)),
            "{document}: {errors:?}"
        );
    }
    // Without `transfer` the file must exist, as upstream has it.
    let plain = json!({"rundir": dir, "local-data": {"rpz": [{"file": new_file}]}}).to_string();
    assert!(strict_errors(&dir, &plain)
        .iter()
        .any(|(p, m)| p == "/local-data/rpz/0/file" && m.contains("does not exist")));
    // kresctl validate --strict says the same, naming the path.
    let file = dir.join("config.json");
    std::fs::write(&file, doc(&new_file, with("tsig-key-file", json!(bad_key)))).expect("config");
    let out = std::process::Command::new(common::KRESCTL)
        .args(["validate", "--strict"])
        .arg(&file)
        .output()
        .expect("kresctl");
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("/local-data/rpz/0/transfer/tsig-key-file"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A primary on `127.0.0.1` (TCP, as the secondary asks) that answers every SOA query with
/// `serial` and notes when each came; any other query closes the connection.
struct CountingPrimary {
    port: u16,
    /// When each SOA query came.
    soa_queries: Arc<std::sync::Mutex<Vec<std::time::Instant>>>,
    stop: Arc<AtomicBool>,
}

impl CountingPrimary {
    fn start(serial: u32) -> CountingPrimary {
        let tcp = TcpListener::bind("127.0.0.1:0").expect("tcp");
        let port = tcp.local_addr().expect("address").port();
        tcp.set_nonblocking(true).expect("nonblocking");
        let soa_queries = Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (queries, stopping) = (soa_queries.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stopping.load(Ordering::SeqCst) {
                let Ok((mut conn, _)) = tcp.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let _ = conn.set_nonblocking(false);
                let _ = conn.set_read_timeout(Some(DNS_TIMEOUT));
                loop {
                    let mut len = [0u8; 2];
                    if conn.read_exact(&mut len).is_err() {
                        break;
                    }
                    let mut msg = vec![0u8; usize::from(u16::from_be_bytes(len))];
                    if conn.read_exact(&mut msg).is_err() {
                        break;
                    }
                    let Some((query, dns::TYPE_SOA)) = question(&msg) else {
                        break;
                    };
                    queries
                        .lock()
                        .expect("lock")
                        .push(std::time::Instant::now());
                    let reply = answer(query, &[soa_record(serial)]);
                    let mut framed = (reply.len() as u16).to_be_bytes().to_vec();
                    framed.extend_from_slice(&reply);
                    if conn.write_all(&framed).is_err() {
                        break;
                    }
                }
            }
        });
        CountingPrimary {
            port,
            soa_queries,
            stop,
        }
    }

    /// When the SOA queries so far came.
    fn queries(&self) -> Vec<std::time::Instant> {
        self.soa_queries.lock().expect("lock").clone()
    }
}

impl Drop for CountingPrimary {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// A NOTIFY (RFC 1996) of [`ZONE`] with `id`, its answer section holding a SOA of `serial`.
fn notify_message(id: u16, serial: u32) -> Vec<u8> {
    let mut msg = id.to_be_bytes().to_vec();
    // Opcode NOTIFY (4), AA; one question, one answer.
    msg.extend_from_slice(&[0x24, 0, 0, 1, 0, 1, 0, 0, 0, 0]);
    for label in ZONE.trim_end_matches('.').split('.') {
        msg.push(label.len() as u8);
        msg.extend_from_slice(label.as_bytes());
    }
    msg.extend_from_slice(&[0, 0, 6, 0, 1]);
    msg.extend_from_slice(&soa_record(serial));
    msg
}

/// NOTIFYs of `serial` sent from `127.0.0.1` (the primary's address) to `to`, `per_second`
/// for `seconds`, in bursts each 10 ms; the answers are read (and counted) on a thread of
/// their own. (NOTIFYs sent, answers received, how long the sending took.)
fn notify_flood(
    to: SocketAddr,
    serial: u32,
    per_second: u32,
    seconds: u32,
) -> (u32, u32, Duration) {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("udp");
    socket.connect(to).expect("connect");
    socket
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    let reader = socket.try_clone().expect("clone");
    let sending = Arc::new(AtomicBool::new(true));
    let answers = std::thread::spawn({
        let sending = sending.clone();
        move || {
            let mut buf = [0u8; 512];
            let mut answered = 0u32;
            loop {
                match reader.recv(&mut buf) {
                    Ok(_) => answered += 1,
                    Err(_) if !sending.load(Ordering::SeqCst) => return answered,
                    Err(_) => {}
                }
            }
        }
    });
    let start = std::time::Instant::now();
    let bursts = seconds * 100;
    let per_burst = per_second / 100;
    let mut sent = 0u32;
    for burst in 0..bursts {
        for _ in 0..per_burst {
            let id = (sent % 65_536) as u16;
            if socket.send(&notify_message(id, serial)).is_ok() {
                sent += 1;
            }
        }
        // The rate of the flood (no event is ordered by this).
        let next = start + Duration::from_millis(10 * u64::from(burst + 1));
        std::thread::sleep(next.saturating_duration_since(std::time::Instant::now()));
    }
    let took = start.elapsed();
    sending.store(false, Ordering::SeqCst);
    let answered = answers.join().expect("the reader");
    (sent, answered, took)
}

/// The sum of `field` over the `rpz-notified` events read from `events` until the NOTIFYs
/// they count reach `at_least`; and how many events that took.
fn notified_until(
    events: &mut EventStream,
    r: &Resolver,
    at_least: u64,
) -> (serde_json::Map<String, Value>, u64) {
    let mut sums = serde_json::Map::new();
    let mut received = 0;
    let mut reports = 0;
    while received < at_least {
        let e = wait_event(events, r, |e| kind(e, "rpz-notified"));
        reports += 1;
        received += e["received"].as_u64().expect("received");
        for field in ["received", "refreshes", "coalesced", "stale"] {
            let sum = sums.get(field).and_then(Value::as_u64).unwrap_or(0);
            sums.insert(
                field.into(),
                json!(sum + e[field].as_u64().expect("a count")),
            );
        }
    }
    (sums, reports)
}

/// The value of the sample `series` of `/metrics/prometheus` (0 when absent).
fn sample(r: &Resolver, series: &str) -> u64 {
    let text = r
        .http("GET", "/metrics/prometheus", b"")
        .expect("metrics")
        .text();
    gauge(&text, series).map_or(0, |v| v as u64)
}

/// The pacing of [`kres_daemon::rpz::pacing`]: its interval between two refreshes.
const INTERVAL: Duration = kres_daemon::rpz::pacing::REFRESH_INTERVAL;

#[test]
fn a_flood_of_notifies_is_paced_and_dns_is_answered_throughout() {
    let bed = testbed::Bed::get().expect("bed");
    let files = Files::new(bed, "rpz-notify-flood");
    let (zone_host, zone_bed) = files.zone();
    stored_zone(&zone_host, 5, &[KEPT]);
    // The primary has the stored serial: every refresh is a SOA query, up to date.
    let primary = CountingPrimary::start(5);
    let notify_port = testbed::free_port().expect("port");
    let listener = SocketAddr::from(([127, 0, 0, 1], notify_port));
    let rpz = rpz_section(
        &zone_bed,
        &[format!("127.0.0.1@{}", primary.port)],
        &format!("        notify-listen: 127.0.0.1@{notify_port}\n"),
    );
    let r = common::start(&setup_for("rpz-notify-flood", rpz)).expect("start");
    let mut events = events(&r);
    wait_event(&mut events, &r, |e| kind(e, "rpz-followed"));
    let first = wait_event(&mut events, &r, |e| kind(e, "rpz-transferred"));
    assert_eq!(first["transfer"], "up-to-date", "{first}");
    assert_eq!(primary.queries().len(), 1, "the refresh at the start");

    // NOTIFYs of the stored serial start nothing: told as stale, no SOA query.
    let (sent, answered, _) = notify_flood(listener, 5, 1000, 1);
    let (stale, _) = notified_until(&mut events, &r, u64::from(answered));
    eprintln!("stale NOTIFYs: {sent} sent, {answered} answered, told {stale:?}");
    assert_eq!(stale["stale"], stale["received"], "{stale:?}");
    assert_eq!(
        primary.queries().len(),
        1,
        "no SOA query for a stale NOTIFY"
    );

    // 1,000 NOTIFYs a second for 10 s of a newer serial (the primary never has it, so every
    // one of them asks for a refresh), while DNS is asked all along.
    let dns_stop = Arc::new(AtomicBool::new(false));
    let asker = std::thread::spawn({
        let (server, stop) = (r.dns(), dns_stop.clone());
        move || {
            let (mut answered, mut failed) = (0u32, Vec::new());
            while !stop.load(Ordering::SeqCst) {
                let name = format!("{KEPT}.");
                match dns::query_udp(server, &name, dns::TYPE_A, DNS_TIMEOUT) {
                    Ok(resp) if resp.rcode == dns::RCODE_NXDOMAIN => answered += 1,
                    Ok(resp) => failed.push(format!("rcode {}", resp.rcode)),
                    Err(e) => failed.push(format!("{e:#}")),
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            (answered, failed)
        }
    });
    let queries_before = primary.queries().len();
    let log_from = std::time::Instant::now();
    let log_before = r.launched.output.text();
    let flood_start = std::time::Instant::now();
    let (sent, answered, took) = notify_flood(listener, 6, 1000, 10);
    let log_after = r.launched.output.text();
    let log_window = log_from.elapsed();
    let during: Vec<Duration> = primary
        .queries()
        .iter()
        .filter(|t| **t >= flood_start && **t <= flood_start + took)
        .map(|t| t.duration_since(flood_start))
        .collect();
    dns_stop.store(true, Ordering::SeqCst);
    let (dns_answered, dns_failed) = asker.join().expect("the asker");
    let (told, reports) = notified_until(&mut events, &r, u64::from(answered));
    let reports_window = flood_start.elapsed();
    // NOTIFYs of a newer serial than the stored one bring a refresh.
    testbed::wait_for("a refresh after the NOTIFYs", START_TIMEOUT, || {
        Ok((primary.queries().len() > queries_before).then_some(()))
    })
    .expect("a refresh");

    let mut per_second = vec![0u32; took.as_secs() as usize + 1];
    for t in &during {
        per_second[t.as_secs() as usize] += 1;
    }
    let added = &log_after[log_before.len()..];
    let notify_lines = added.lines().filter(|l| l.contains("NOTIFY")).count();
    eprintln!(
        "NOTIFY flood: {sent} sent in {took:?}, {answered} answered; SOA queries at the primary \
         during it: {} ({per_second:?} per second); log: {} bytes, {} lines ({notify_lines} about \
         NOTIFY); {reports} rpz-notified events telling {told:?}; DNS: {dns_answered} answered, \
         {} unanswered",
        during.len(),
        added.len(),
        added.lines().count(),
        dns_failed.len()
    );
    // A refresh at most once per interval (the first of the window may be one due from before).
    let allowed = (took.as_secs_f64() / INTERVAL.as_secs_f64()).floor() as usize + 2;
    assert!(
        during.len() <= allowed,
        "{} SOA queries in {took:?}, at most {allowed} allowed",
        during.len()
    );
    assert_eq!(queries_before, 1, "nothing came between");
    // At most a line (and an event) a second, over the time the log and the events were
    // read (one more line for the pipe's delay).
    let lines_allowed = log_window.as_secs_f64().ceil() as usize + 2;
    assert!(
        notify_lines <= lines_allowed,
        "{notify_lines} lines in {log_window:?}:\n{added}"
    );
    let reports_allowed = reports_window.as_secs_f64().ceil() as u64 + 1;
    assert!(
        reports <= reports_allowed,
        "{reports} reports in {reports_window:?}"
    );
    let received = told["received"].as_u64().expect("a count");
    assert!(
        (u64::from(answered)..=u64::from(sent)).contains(&received),
        "every NOTIFY answered is counted: {received}"
    );
    assert_eq!(told["stale"], 0, "{told:?}");
    assert!(dns_failed.is_empty(), "DNS unanswered: {dns_failed:?}");
    assert!(dns_answered > 0);
    // The counts of /metrics are those of the events.
    let series = |result: &str| {
        sample(
            &r,
            &format!("knot_resolver_rpz_notifies_total{{zone=\"{ZONE}\",result=\"{result}\"}}"),
        )
    };
    assert_eq!(series("stale"), stale["stale"].as_u64().expect("a count"));
    let counted = series("refresh") + series("coalesced");
    assert!(
        (received..=u64::from(sent)).contains(&counted),
        "{counted} NOTIFYs in /metrics, {received} told by events, {sent} sent"
    );
    assert!(
        series("refresh") <= allowed as u64 + 1,
        "{}",
        series("refresh")
    );
    assert_stored_policy_kept(&r, &zone_host);
    r.stop();
}

#[test]
fn a_serial_bumped_every_second_costs_one_policy_loader_run_per_interval() {
    let bed = testbed::Bed::get().expect("bed");
    let notify_port = testbed::free_port().expect("port");
    let notify: SocketAddr = format!("127.0.0.1:{notify_port}").parse().expect("address");
    let mut primary = listed_primary(bed, Some(notify));
    let listen = format!("        notify-listen: 127.0.0.1@{notify_port}\n");
    let (r, _files) = secondary_of("rpz-bumps", &primary, &listen);
    let mut events = events(&r);
    // The first transfer (at the start), then the zone is followed.
    wait_event(&mut events, &r, |e| kind(e, "rpz-transferred"));
    wait_event(&mut events, &r, |e| kind(e, "rpz-followed"));
    let start = std::time::Instant::now();
    let bumps = 12u32;
    let mut last = 0;
    for i in 0..bumps {
        let name = format!("bump{i}.blocked-by-rpz.net");
        last = primary.bump(&[&name], &[]).expect("bump");
        // A change a second (the rate of the input; no event is ordered by this).
        let next = start + Duration::from_secs(u64::from(i) + 1);
        std::thread::sleep(next.saturating_duration_since(std::time::Instant::now()));
    }
    // The last change is not lost: it is transferred and in force.
    let (mut transfers, mut loader_runs, mut renews) = (0u32, 0u32, 0u32);
    loop {
        let e = wait_event(&mut events, &r, |e| {
            kind(e, "rpz-transferred")
                || kind(e, "policy-loader-finished")
                || (kind(e, "config-applied") && e["cause"] == "renew")
        });
        match e["kind"].as_str() {
            Some("rpz-transferred") => transfers += 1,
            Some("policy-loader-finished") => loader_runs += 1,
            _ => {
                renews += 1;
                if transfers > 0 && renews >= transfers && applied_serial(&r) == Some(last) {
                    break;
                }
            }
        }
    }
    let took = start.elapsed();
    assert!(blocked(
        &r,
        &format!("bump{}.blocked-by-rpz.net", bumps - 1)
    ));
    eprintln!(
        "{bumps} bumps a second: {transfers} transfers, {renews} renews, {loader_runs} \
         policy-loader runs in {took:?}"
    );
    let allowed = (took.as_secs_f64() / INTERVAL.as_secs_f64()).floor() as u32 + 1;
    assert!(
        loader_runs <= allowed && renews <= allowed,
        "{loader_runs} policy-loader runs, {renews} renews in {took:?}: at most {allowed}"
    );
    assert!(loader_runs < bumps, "coalesced");
    r.stop();
}

/// The serial `GET /rpz` says is stored.
fn applied_serial(r: &Resolver) -> Option<u32> {
    rpz_status(r)["serial"].as_u64().map(|s| s as u32)
}
