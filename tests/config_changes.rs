//! Configuration changes on real kresd: rejected configurations change nothing, worker counts
//! follow `workers`, policy-only changes reach answers without restarting workers, reloads by
//! SIGHUP and by kresctl, and the API's ETag preconditions.

mod common;

use common::{Setup, START_TIMEOUT};
use nix::sys::signal::Signal;
use serde_json::{json, Value};

fn records(ip: &str) -> String {
    format!("local-data:\n  records: |\n    p.test. 300 A {ip}\n")
}

fn a(r: &common::Resolver) -> Vec<String> {
    r.a_records("p.test.")
}

#[test]
fn a_worker_breaking_config_is_refused_and_the_old_one_keeps_serving() {
    let r = common::start(
        &Setup::new("canary-refuses")
            .workers(2)
            .extra(&records("192.0.2.1")),
    )
    .expect("start");
    let before = r.pids_named("kresd");
    // 192.0.2.1 is not an address of this machine: the daemon cannot bind it without freebind
    // (tests/listen_sockets.rs covers the canary's refusal when kresd binds its sockets).
    let listen =
        json!([{"interface": format!("127.0.0.1@{}", r.port)}, {"interface": "192.0.2.1@53"}]);
    let resp = r.put_json("/network/listen", listen);
    assert_eq!(resp.status, 400, "{}", resp.text());
    let text = resp.text();
    assert!(text.contains("cannot bind 192.0.2.1:53"), "{text}");
    assert_eq!(r.pids_named("kresd"), before, "workers untouched");
    assert_eq!(a(&r), vec!["192.0.2.1"]);
    let cfg = r.http("GET", "/v1/config", b"").expect("GET");
    let cfg: Value = serde_json::from_slice(&cfg.body).expect("json");
    assert_eq!(
        cfg["network"]["listen"].as_array().map(Vec::len),
        Some(1),
        "rejected change not stored: {cfg}"
    );
    // No canary left behind.
    assert_eq!(r.pids_named("kresd").len(), 2);
    r.stop();
}

#[test]
fn lua_that_errors_is_refused_by_the_canary() {
    let r = common::start(
        &Setup::new("canary-lua")
            .workers(2)
            .extra(&records("192.0.2.7")),
    )
    .expect("start");
    let before = r.pids_named("kresd");
    let resp = r.put_json(
        "/lua",
        json!({"script": "error('the canary must catch this')"}),
    );
    assert_eq!(resp.status, 400, "{}", resp.text());
    let text = resp.text();
    assert!(
        text.contains("canary") && text.contains("the canary must catch this"),
        "{text}"
    );
    assert_eq!(r.pids_named("kresd"), before, "workers untouched");
    assert_eq!(a(&r), vec!["192.0.2.7"]);
    let cfg: Value =
        serde_json::from_slice(&r.http("GET", "/v1/config", b"").expect("GET").body).expect("json");
    assert!(
        cfg.get("lua").is_none(),
        "rejected change not stored: {cfg}"
    );
    r.stop();
}

#[test]
fn workers_scale_two_five_one() {
    let r =
        common::start(&Setup::new("scale").workers(2).extra(&records("192.0.2.2"))).expect("start");
    for n in [5usize, 1] {
        let out = r
            .kresctl(&["config", "set", "-p", "/workers", &n.to_string()])
            .expect("kresctl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(r.pids_named("kresd").len(), n, "after workers={n}");
        let pids = r.kresctl(&["pids", "kresd"]).expect("pids");
        assert_eq!(String::from_utf8_lossy(&pids.stdout).lines().count(), n);
        assert_eq!(a(&r), vec!["192.0.2.2"]);
    }
    r.stop();
}

#[test]
fn a_policy_only_change_is_answered_without_restarting_workers() {
    let r = common::start(
        &Setup::new("policy-only")
            .workers(2)
            .extra(&records("192.0.2.3")),
    )
    .expect("start");
    let before = r.pids_named("kresd");
    assert_eq!(a(&r), vec!["192.0.2.3"]);
    let resp = r.put_json("/local-data/records", json!("p.test. 300 A 192.0.2.33\n"));
    assert_eq!(resp.status, 200, "{}", resp.text());
    // Every worker answers the new data: ask enough times to hit both.
    for _ in 0..10 {
        assert_eq!(a(&r), vec!["192.0.2.33"]);
    }
    assert_eq!(r.pids_named("kresd"), before, "no worker restarted");
    r.stop();
}

#[test]
fn sighup_and_kresctl_reload_reread_the_file() {
    let mut r = common::start(&Setup::new("reload").workers(2).extra(&records("192.0.2.4")))
        .expect("start");
    let config = std::fs::read_to_string(&r.config).expect("read config");

    // SIGHUP: RELOADING=1 (with MONOTONIC_USEC, or systemd ignores it), then READY=1.
    std::fs::write(&r.config, config.replace("192.0.2.4", "192.0.2.44")).expect("write");
    let seen = r.notify.received.len();
    r.launched.signal(Signal::SIGHUP).expect("SIGHUP");
    let reloading = r
        .notify
        .wait_for_after(seen, "RELOADING=1", START_TIMEOUT)
        .expect("RELOADING=1");
    assert!(reloading.contains("MONOTONIC_USEC="), "{reloading}");
    r.notify
        .wait_for_after(seen, "READY=1", START_TIMEOUT)
        .expect("READY=1 after the reload");
    assert_eq!(a(&r), vec!["192.0.2.44"]);

    // An invalid file is reported and changes nothing.
    std::fs::write(&r.config, config.replace("workers: 2", "workers: -3")).expect("write");
    let out = r.kresctl(&["reload"]).expect("kresctl reload");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/workers"), "{err}");
    assert_eq!(a(&r), vec!["192.0.2.44"]);
    assert_eq!(r.pids_named("kresd").len(), 2);

    // A valid one through kresctl (systemd's ExecReload): RELOADING=1 and READY=1 around it;
    // the manager notifies READY=1 before the API answers.
    std::fs::write(&r.config, config.replace("192.0.2.4", "192.0.2.45")).expect("write");
    let seen = r.notify.received.len();
    let out = r.kresctl(&["reload"]).expect("kresctl reload");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    r.notify
        .wait_for_after(seen, "RELOADING=1", START_TIMEOUT)
        .expect("RELOADING=1");
    r.notify
        .wait_for_after(seen, "READY=1", START_TIMEOUT)
        .expect("READY=1 after the reload");
    assert_eq!(a(&r), vec!["192.0.2.45"]);
    let before = r.pids_named("kresd");
    let out = r
        .kresctl(&["reload", "--force"])
        .expect("kresctl reload --force");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = r.pids_named("kresd");
    assert_eq!(after.len(), 2);
    assert!(
        after.iter().all(|p| !before.contains(p)),
        "--force restarts every worker: {before:?} -> {after:?}"
    );
    r.stop();
}

#[test]
fn api_etags_preconditions_and_methods() {
    let r = common::start(&Setup::new("etag").extra(&records("192.0.2.6"))).expect("start");
    let get = r.http("GET", "/v1/config", b"").expect("GET");
    let tag = get.header("etag").expect("ETag").to_owned();
    let h = |name: &str, value: &str| {
        testbed::http::request(&r.api, "GET", "/v1/config/workers", &[(name, value)], b"")
            .expect("GET")
    };
    assert_eq!(h("If-None-Match", &tag).status, 304);
    assert_eq!(
        h("If-Match", "\"other\"").status,
        412,
        "a failed If-Match is 412, not 304"
    );
    assert_eq!(h("If-Match", &tag).status, 200);
    let head = r.http("HEAD", "/v1/config", b"").expect("HEAD");
    assert_eq!(head.status, 200);
    assert_eq!(
        r.http("GET", "/v1/config/nope", b"").expect("GET").status,
        404
    );

    // A stale If-Match refuses the change.
    let put = |tag: &str, body: &str| {
        testbed::http::request(
            &r.api,
            "PUT",
            "/v1/config/local-data/records",
            &[("If-Match", tag), ("Content-Type", "application/json")],
            body.as_bytes(),
        )
        .expect("PUT")
    };
    let ok = put(&tag, "\"p.test. 300 A 192.0.2.66\\n\"");
    assert_eq!(ok.status, 200, "{}", ok.text());
    let new_tag = ok.header("etag").expect("new ETag").to_owned();
    assert_ne!(new_tag, tag);
    assert_eq!(put(&tag, "\"p.test. 300 A 192.0.2.67\\n\"").status, 412);
    assert_eq!(a(&r), vec!["192.0.2.66"]);

    // YAML bodies, JSON Patch with numbers and move, DELETE.
    let yaml = testbed::http::request(
        &r.api,
        "PUT",
        "/v1/config/local-data/records",
        &[("Content-Type", "application/yaml")],
        b"|\n  p.test. 300 A 192.0.2.68\n",
    )
    .expect("PUT yaml");
    assert_eq!(yaml.status, 200, "{}", yaml.text());
    assert_eq!(a(&r), vec!["192.0.2.68"]);
    let patch = json!([
        {"op": "add", "path": "/options", "value": {"minimize": false}},
        {"op": "replace", "path": "/workers", "value": 1},
        {"op": "test", "path": "/workers", "value": 1}
    ]);
    let resp = r
        .http("PATCH", "/v1/config", patch.to_string().as_bytes())
        .expect("PATCH");
    assert_eq!(resp.status, 200, "{}", resp.text());
    let resp = r.http("DELETE", "/v1/config/options", b"").expect("DELETE");
    assert_eq!(resp.status, 200, "{}", resp.text());
    let cfg: Value =
        serde_json::from_slice(&r.http("GET", "/v1/config", b"").expect("GET").body).expect("json");
    assert!(cfg.get("options").is_none() && cfg["workers"] == 1, "{cfg}");
    assert_eq!(
        r.http("DELETE", "/v1/config/options", b"")
            .expect("DELETE")
            .status,
        404
    );

    // Invalid values: 400 listing every error with its path; nothing changes.
    let bad = json!([{"op": "replace", "path": "/workers", "value": 0}, {"op": "add", "path": "/cache", "value": {"size-max": "lots"}}]);
    let resp = r
        .http("PATCH", "/v1/config", bad.to_string().as_bytes())
        .expect("PATCH");
    assert_eq!(resp.status, 400);
    assert!(
        resp.text().contains("/workers") && resp.text().contains("/cache/size-max"),
        "{}",
        resp.text()
    );
    // Immutable sections.
    let resp = r
        .http("PUT", "/v1/config/rundir", b"\"/tmp\"")
        .expect("PUT rundir");
    assert_eq!(resp.status, 400, "{}", resp.text());
    assert!(resp.text().contains("/rundir"), "{}", resp.text());
    r.stop();
}

#[test]
fn health_and_schema_routes() {
    let r = common::start(&Setup::new("health").workers(2)).expect("start");
    assert_eq!(r.http("GET", "/livez", b"").expect("livez").status, 200);
    let ready = r.http("GET", "/readyz", b"").expect("readyz");
    assert_eq!(ready.status, 200, "{}", ready.text());
    let schema = r.http("GET", "/schema", b"").expect("schema");
    assert_eq!(schema.status, 200);
    let schema: Value = serde_json::from_slice(&schema.body).expect("schema JSON");
    assert!(schema["properties"]["workers"].is_object());
    let ui = r.http("GET", "/schema/ui", b"").expect("schema ui");
    assert_eq!(ui.status, 200);
    assert!(ui.text().contains("fetch(\"/schema\")") && !ui.text().contains("json-schema.app"));
    let out = r.kresctl(&["processes"]).expect("processes");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("kresd0") && table.contains("running") && table.contains("cache-gc"),
        "{table}"
    );
    r.stop();
}

#[test]
fn a_policy_loader_refusal_says_what_kresd_said() {
    let r = common::start(
        &Setup::new("policy-loader-says")
            .workers(2)
            .extra(&records("192.0.2.8")),
    )
    .expect("start");
    let before = r.pids_named("kresd");
    let out = r
        .kresctl(&[
            "config",
            "set",
            "-p",
            "/local-data/records",
            "p.test. 300 A 192.0.2.88\nthis is no record\n",
        ])
        .expect("kresctl");
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("policy-loader failed: exit code 1")
            && said.contains("its last output:")
            && said.contains("error parsing zone file"),
        "{said}"
    );
    assert_eq!(a(&r), vec!["192.0.2.8"], "the running rules keep serving");
    assert_eq!(r.pids_named("kresd"), before, "workers untouched");
    r.stop();
}
