//! In-place upgrade of the daemon on real kresd under load: `kresctl upgrade` (and SIGUSR2)
//! re-execute the binary at the daemon's path, a newer one put there meanwhile, keeping the
//! daemon's pid, every worker and every socket; no query of the load is lost. A broken new
//! binary is refused before anything stops, and a new image that cannot adopt falls back to
//! the old binary, which adopts everything again.
//!
//! The "newer" binary is a copy of the one cargo built with a build label written into it
//! (`kres_daemon::BUILD_LABEL_MARKER`), so it reports another version.

mod common;

use std::path::{Path, PathBuf};

use common::{Setup, DAEMON, START_TIMEOUT};
use testbed::load::{Load, LoadSpec};

const RECORDS: &str = "local-data:\n  addresses:\n    upgrade.test: 192.0.2.77\n";

/// A copy of the daemon at `to`, labelled `label` (empty: as built).
fn install(to: &Path, label: &str) {
    let mut bytes = std::fs::read(DAEMON).expect("the daemon binary");
    let marker = kres_daemon::BUILD_LABEL_MARKER;
    let at = bytes
        .windows(marker.len())
        .position(|w| w == marker)
        .expect("the build label's area in the binary")
        + marker.len();
    assert!(label.len() < 40);
    for (i, b) in label
        .bytes()
        .chain(std::iter::repeat(0))
        .take(40)
        .enumerate()
    {
        bytes[at + i] = b;
    }
    write_executable(to, &bytes);
}

/// Put `bytes` at `to` as an executable, as a package manager does.
fn write_executable(to: &Path, bytes: &[u8]) {
    testbed::chaos::write_executable(to, bytes).expect("the executable written");
}

/// What `GET /upgrade` says: the running version, and the last upgrade.
fn status(r: &common::Resolver) -> serde_json::Value {
    let response = r.http("GET", "/upgrade", b"").expect("GET /upgrade");
    assert_eq!(response.status, 200, "{}", response.text());
    serde_json::from_str(&response.text()).expect("JSON")
}

fn kresctl_upgrade(r: &common::Resolver) -> (bool, String) {
    let out = r.kresctl(&["upgrade"]).expect("kresctl");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn an_upgrade_under_load_keeps_every_process_and_loses_nothing() {
    let bed = testbed::Bed::get().expect("test bed");
    let bin_dir = bed.test_dir("upgrade-bin").expect("dir");
    std::fs::create_dir_all(bin_dir.host("bin")).expect("bin dir");
    let exe: PathBuf = bin_dir.host("bin/knot-resolver");
    install(&exe, "");
    let setup = Setup::new("upgrade")
        .workers(2)
        .extra(RECORDS)
        .program(&exe)
        .env("KRES_FAULT_INJECTION", "1");
    let mut r = common::start(&setup).expect("start");
    let built = kres_daemon::VERSION;
    assert_eq!(status(&r)["version"], built);
    assert!(status(&r)["last"].is_null());
    let root = r.launched.pid();
    let workers = r.pids_named("kresd");
    assert_eq!(workers.len(), 2, "{workers:?}");

    // The newer binary, installed over the running one.
    install(&exe, "upgrade-test");
    let load = Load::start(LoadSpec::new(r.dns(), 4000, "upgrade.test.")).expect("load");
    assert!(
        load.wait_answers(2000, START_TIMEOUT),
        "the load is answered"
    );
    let seen = r.notify.received.len();
    let began = std::time::Instant::now();
    let (ok, text) = kresctl_upgrade(&r);
    eprintln!("kresctl upgrade took {:.1?}", began.elapsed());
    assert!(ok, "kresctl upgrade: {text}\n{}", r.launched.output.text());
    let newer = format!("{built}+upgrade-test");
    assert!(
        text.contains(&format!("upgraded: {built} -> {newer}")),
        "{text}"
    );
    r.notify
        .wait_for_after(seen, "RELOADING=1", START_TIMEOUT)
        .expect("RELOADING=1 before the re-execution");
    r.notify
        .wait_for_after(seen, "READY=1", START_TIMEOUT)
        .expect("READY=1 after the adoption");
    let answered = load.answered();
    assert!(
        load.wait_answers(answered + 2000, START_TIMEOUT),
        "answered after the upgrade"
    );
    let report = load.stop();
    eprintln!("upgrade under load: {report}");
    assert_eq!(report.lost, 0, "{report}");
    assert_eq!(report.send_failures, 0, "{report}");
    assert_eq!(r.launched.pid(), root);
    assert!(
        r.launched.tree().iter().any(|p| p.pid == root),
        "the root runs on"
    );
    assert_eq!(r.pids_named("kresd"), workers, "no worker was restarted");
    let after = status(&r);
    assert_eq!(after["version"], newer.as_str());
    assert_eq!(after["last"]["outcome"], "upgraded");
    assert_eq!(after["last"]["from"], built);
    assert_eq!(after["last"]["generation"], 1);
    let root_answer = r.http("GET", "/", b"").expect("GET /");
    assert!(
        root_answer.text().contains(&newer),
        "{}",
        root_answer.text()
    );

    // The new manager announces the upgrade on /events, once, right after its start.
    let mut events =
        testbed::http::EventStream::open(&r.api, "/events", &[("Last-Event-ID", "0.0-0")])
            .expect("GET /events");
    let kinds: Vec<serde_json::Value> = (0..3)
        .map(|_| {
            let m = events
                .next(START_TIMEOUT)
                .expect("an event")
                .expect("not ended");
            serde_json::from_str(&m.data).expect("JSON")
        })
        .collect();
    assert_eq!(kinds[0]["kind"], "events-missed", "{kinds:#?}");
    assert_eq!(kinds[1]["kind"], "manager-started", "{kinds:#?}");
    assert_eq!(kinds[2]["kind"], "upgrade", "{kinds:#?}");
    assert_eq!(kinds[2]["outcome"], "upgraded", "{kinds:#?}");
    assert_eq!(kinds[2]["to"], newer.as_str(), "{kinds:#?}");
    drop(events);

    // A broken binary at the path: refused before anything stops.
    let manager = r.pids_named("kres-manager");
    for broken in [&b"not a binary at all\n"[..], b"#!/bin/sh\nexit 3\n"] {
        write_executable(&exe, broken);
        let (ok, text) = kresctl_upgrade(&r);
        assert!(!ok, "a broken binary is refused: {text}");
        assert!(
            text.contains("knot-resolver"),
            "the reason names the binary: {text}"
        );
        assert_eq!(status(&r)["version"], newer.as_str());
        assert_eq!(
            r.pids_named("kres-manager"),
            manager,
            "not even the manager stopped"
        );
    }
    // The same by signal: logged, nothing changes.
    r.launched
        .signal(nix::sys::signal::Signal::SIGUSR2)
        .expect("SIGUSR2");
    r.launched
        .output
        .wait_for_count("upgrade refused", 3, START_TIMEOUT)
        .expect("the refusal is logged");
    assert_eq!(r.pids_named("kresd"), workers);

    // SIGUSR2 upgrades like kresctl, again and again.
    install(&exe, "by-signal");
    let seen = r.notify.received.len();
    r.launched
        .signal(nix::sys::signal::Signal::SIGUSR2)
        .expect("SIGUSR2");
    r.notify
        .wait_for_after(seen, "READY=1", START_TIMEOUT)
        .expect("READY=1 after the adoption");
    let by_signal = format!("{built}+by-signal");
    testbed::wait_for("the version of the binary installed", START_TIMEOUT, || {
        Ok((status(&r)["version"] == by_signal.as_str()).then_some(()))
    })
    .expect("upgraded by signal");
    assert_eq!(status(&r)["last"]["generation"], 2);
    assert_eq!(r.pids_named("kresd"), workers);
    assert_eq!(r.launched.pid(), root);
    assert_eq!(r.a_records("upgrade.test."), ["192.0.2.77"]);
    r.stop();
}

#[test]
fn a_new_image_that_cannot_adopt_falls_back_to_the_old_binary() {
    let bed = testbed::Bed::get().expect("test bed");
    let bin_dir = bed.test_dir("upgrade-fallback-bin").expect("dir");
    std::fs::create_dir_all(bin_dir.host("bin")).expect("bin dir");
    let exe: PathBuf = bin_dir.host("bin/knot-resolver");
    install(&exe, "");
    // Every new image with an old binary to fall back to refuses its state.
    let setup = Setup::new("upgrade-fallback")
        .workers(2)
        .extra(RECORDS)
        .program(&exe)
        .env("KRES_FAULT_INJECTION", "refuse-upgrade-state");
    let r = common::start(&setup).expect("start");
    let root = r.launched.pid();
    let workers = r.pids_named("kresd");
    install(&exe, "never-runs");
    let (ok, text) = kresctl_upgrade(&r);
    assert!(!ok, "the upgrade failed: {text}");
    assert!(text.contains("could not adopt"), "{text}");
    let after = status(&r);
    assert_eq!(
        after["version"],
        kres_daemon::VERSION,
        "the old binary runs"
    );
    assert_eq!(after["last"]["outcome"], "failed");
    assert_eq!(r.launched.pid(), root);
    assert_eq!(r.pids_named("kresd"), workers, "no worker was restarted");
    assert_eq!(r.a_records("upgrade.test."), ["192.0.2.77"]);
    r.stop();
}
