//! Upstream's packaging checks (`tests/packaging/interactive/*.sh`), run against our daemon
//! with real kresd in the test bed. Upstream runs them against the installed service and
//! greps the journal; here the journal is the daemon's own log output (`Launched.output`).
//! Like upstream, the interactive checks run one after another against one resolver.
//! Also here: the management API on TCP, and the unix socket's permissions.

mod common;

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use common::{Resolver, Setup, START_TIMEOUT, STOP_TIMEOUT};
use nix::sys::signal::Signal;
use serde_json::Value;

/// Upstream's log line for a configuration that (re)started workers.
const APPLIED_TO_WORKERS: &str = "Config applied successfully to all workers";
/// Our log line for a configuration applied without touching the workers.
const APPLIED_KEEPING_WORKERS: &str = "Config applied; workers kept running";
const TLS_RELOAD: &str = "TLS cert files reload triggered";
const LOG_TIMEOUT: Duration = Duration::from_secs(30);

fn kresctl_ok(r: &Resolver, args: &[&str]) -> String {
    let out = r.kresctl(args).expect("kresctl runs");
    assert!(
        out.status.success(),
        "kresctl {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        r.launched.output.text()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stop(mut r: Resolver) {
    r.launched.signal(Signal::SIGTERM).expect("signal");
    let status = r.launched.wait(STOP_TIMEOUT).expect("exit");
    assert_eq!(status.code(), Some(0), "{}", r.launched.output.text());
}

/// Lines containing "error" (any case) that are not from kresd's own output.
fn error_lines(r: &Resolver) -> Vec<String> {
    r.launched
        .output
        .text()
        .lines()
        .filter(|l| l.to_ascii_lowercase().contains("error"))
        .map(str::to_owned)
        .collect()
}

/// Run a change and wait until it logged one more `APPLIED_KEEPING_WORKERS` or
/// `APPLIED_TO_WORKERS` line, whichever `restarted` names; returns whether the other line
/// appeared meanwhile (it must not).
fn expect_applied(r: &Resolver, restarted: bool, change: impl FnOnce()) {
    let out = &r.launched.output;
    let (expected, other) = if restarted {
        (APPLIED_TO_WORKERS, APPLIED_KEEPING_WORKERS)
    } else {
        (APPLIED_KEEPING_WORKERS, APPLIED_TO_WORKERS)
    };
    let before = (out.count(expected), out.count(other));
    change();
    out.wait_for_count(expected, before.0 + 1, LOG_TIMEOUT)
        .expect("applied");
    assert_eq!(
        out.count(other),
        before.1,
        "{other:?} logged unexpectedly:\n{}",
        out.text()
    );
}

fn leaves(v: &Value) -> usize {
    match v {
        Value::Object(m) => m.values().map(leaves).sum(),
        Value::Array(a) => a.iter().map(leaves).sum(),
        _ => 1,
    }
}

/// `etag.sh`: the ETag of `/v1/config` sent back as `If-None-Match` gives 304.
fn etag(r: &Resolver) {
    let first = r.http("GET", "/v1/config", b"").expect("GET");
    assert_eq!(first.status, 200);
    let tag = first.header("etag").expect("an ETag").to_owned();
    let again =
        testbed::http::request(&r.api, "GET", "/v1/config", &[("If-None-Match", &tag)], b"")
            .expect("GET");
    assert_eq!(again.status, 304, "etag.sh");
}

/// `schema.sh`: `kresctl schema` and `kresctl schema --live` succeed (and agree).
fn schema(r: &Resolver) {
    let local: Value = serde_json::from_str(&kresctl_ok(r, &["schema"])).expect("JSON");
    let live: Value = serde_json::from_str(&kresctl_ok(r, &["schema", "--live"])).expect("JSON");
    assert_eq!(local, live, "schema.sh");
}

/// `metrics.sh`: `/metrics` answers without following a redirect, `kresctl metrics` and
/// `--prometheus` work, and the `resolver*` samples are the JSON leaves + 2 per worker.
fn metrics(r: &Resolver, workers: usize) {
    let redirect = r.http("GET", "/metrics", b"").expect("GET /metrics");
    assert_eq!(redirect.status, 301, "metrics.sh");
    let json: Value = serde_json::from_str(&kresctl_ok(r, &["metrics"])).expect("JSON");
    let prometheus = kresctl_ok(r, &["metrics", "--prometheus"]);
    let samples = prometheus
        .lines()
        .filter(|l| l.starts_with("resolver"))
        .count();
    assert_eq!(
        samples,
        leaves(&json) + 2 * workers,
        "metrics.sh:\n{prometheus}"
    );
}

/// `cache-clear.sh`.
fn cache_clear(r: &Resolver) {
    kresctl_ok(r, &["cache", "clear"]);
    let out = kresctl_ok(
        r,
        &[
            "cache",
            "clear",
            "--json",
            "--exact-name",
            "--rr-type",
            "AAAA",
            "example.com.",
        ],
    );
    let _: Value = serde_json::from_str(&out).expect("cache-clear.sh: JSON output");
}

/// `reload.sh`: reloading unchanged files does not restart workers; `--force` does.
fn reload(r: &Resolver) {
    expect_applied(r, false, || {
        kresctl_ok(r, &["reload"]);
    });
    expect_applied(r, true, || {
        kresctl_ok(r, &["reload", "--force"]);
    });
}

/// `renew.sh`: the same with `POST /renew` and `/renew/force`.
fn renew(r: &Resolver) {
    expect_applied(r, false, || {
        assert_eq!(r.http("POST", "/renew", b"").expect("renew").status, 200);
    });
    expect_applied(r, true, || {
        let resp = r.http("POST", "/renew/force", b"").expect("renew");
        assert_eq!(resp.status, 200, "{}", resp.text());
    });
}

/// `workers.sh`: once `config set -p /workers 5` returns, exactly 5 kresd run (no canary,
/// no policy-loader left).
fn workers(r: &Resolver) {
    kresctl_ok(r, &["config", "set", "-p", "/workers", "5"]);
    assert_eq!(r.pids_named("kresd").len(), 5, "workers.sh");
    // Not upstream's: changes are logged with the client's credentials.
    let line = r
        .launched
        .output
        .wait_for("API PUT /v1/config/workers from uid ", LOG_TIMEOUT)
        .expect("audit line");
    assert!(line.ends_with(": 200"), "{line}");
}

#[test]
fn interactive_checks() {
    let r = common::start(&Setup::new("packaging").workers(2)).expect("start");
    etag(&r);
    schema(&r);
    metrics(&r, 2);
    cache_clear(&r);
    reload(&r);
    renew(&r);
    workers(&r);
    metrics(&r, 5);
    let errors = error_lines(&r);
    assert!(errors.is_empty(), "{errors:#?}");
    stop(r);
}

/// `files_reload.sh`: a change that leaves the workers alone reloads the TLS certificate; a
/// change that restarts them does not (they load it anyway).
#[test]
fn files_reload() {
    let r = common::start(&Setup::new("files-reload").workers(2)).expect("start");
    let out = &r.launched.output;
    expect_applied(&r, false, || {
        kresctl_ok(&r, &["reload"]);
    });
    assert_eq!(out.count(TLS_RELOAD), 0, "no TLS configured");

    let cert = r.dir.host("cert.pem");
    let key = r.dir.host("key.pem");
    testbed::self_signed_cert("resolver.test", &cert, &key).expect("certificate");
    let tls = format!(
        "{{\"cert-file\": \"{}\", \"key-file\": \"{}\"}}",
        r.dir.bed("cert.pem").display(),
        r.dir.bed("key.pem").display()
    );
    expect_applied(&r, true, || {
        kresctl_ok(&r, &["config", "set", "-p", "/network/tls", &tls]);
    });
    let reloads = out.count(TLS_RELOAD);
    // Unchanged worker configuration: the certificate is reloaded.
    expect_applied(&r, false, || {
        kresctl_ok(&r, &["config", "set", "-p", "/workers", "2"]);
    });
    assert_eq!(out.count(TLS_RELOAD), reloads + 1, "{}", out.text());
    // A real change restarts workers instead.
    expect_applied(&r, true, || {
        kresctl_ok(&r, &["config", "set", "-p", "/workers", "5"]);
    });
    assert_eq!(out.count(TLS_RELOAD), reloads + 1, "{}", out.text());
    expect_applied(&r, false, || {
        kresctl_ok(&r, &["config", "set", "-p", "/workers", "5"]);
    });
    assert_eq!(out.count(TLS_RELOAD), reloads + 2, "{}", out.text());
    let errors = error_lines(&r);
    assert!(errors.is_empty(), "{errors:#?}");
    stop(r);
}

/// The API on TCP: reachable with `-s http://ip:port` and through `-c CONFIG`; no unix
/// socket is created.
#[test]
fn management_on_tcp() {
    let port = testbed::free_port().expect("port");
    let r = common::start(
        &Setup::new("api-tcp").management(&format!("  interface: 127.0.0.1@{port}\n")),
    )
    .expect("start");
    assert!(!r.api.exists(), "no unix socket");
    let url = format!("http://127.0.0.1:{port}");
    for args in [
        vec!["-s", url.as_str(), "pids", "kresd"],
        vec!["-c", r.config.to_str().expect("UTF-8"), "pids", "kresd"],
    ] {
        let out = std::process::Command::new(common::KRESCTL)
            .args(&args)
            .output()
            .expect("kresctl");
        assert!(out.status.success(), "{args:?}: {out:?}");
        let pids = String::from_utf8_lossy(&out.stdout);
        assert_eq!(pids.lines().count(), 1, "{args:?}: {pids}");
    }
    // Upstream's kresctl reaches it too, through the configuration file (6.5.0 treats every
    // `-s` value as a socket path).
    let config = r.dir.bed("config.yaml");
    let theirs = r
        .bed
        .run_installed(
            "/usr/bin/kresctl",
            &[
                "-c",
                config.to_str().expect("UTF-8"),
                "config",
                "get",
                "--json",
                "-p",
                "/workers",
            ],
        )
        .expect("upstream kresctl");
    assert!(theirs.status.success(), "{theirs:?}");
    assert_eq!(String::from_utf8_lossy(&theirs.stdout).trim(), "1");
    stop(r);
}

/// Upstream stops the resolver with exit code 1 when the API cannot listen; so do we, and
/// nothing is left running.
#[test]
fn an_api_bind_failure_stops_the_resolver() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let mut r = common::launch(
        &Setup::new("api-bind-fails").management(&format!("  interface: 127.0.0.1@{port}\n")),
    )
    .expect("launch");
    let status = r.launched.wait(START_TIMEOUT).expect("exits");
    assert_eq!(status.code(), Some(1), "{}", r.launched.output.text());
    assert!(
        r.launched.tree().is_empty(),
        "left: {:?}",
        r.launched.tree()
    );
    assert!(r
        .notify
        .wait_for("READY=1", Duration::from_millis(100))
        .is_err());
    let text = r.launched.output.text();
    assert!(text.contains("cannot listen on"), "{text}");
}

/// The unix socket is `srw-rw----` and owned by the resolver's user and group.
#[test]
fn the_unix_socket_is_for_the_resolvers_user_and_group() {
    let r = common::start(&Setup::new("api-socket-mode")).expect("start");
    let meta = std::fs::metadata(&r.api).expect("socket");
    assert_eq!(meta.mode() & 0o7777, 0o660);
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", r.launched.pid())).expect("status");
    let id = |field: &str| -> u32 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .expect("id")
    };
    assert_eq!((meta.uid(), meta.gid()), (id("Uid:"), id("Gid:")));
    stop(r);
}

/// The API on IPv6 TCP: our kresctl brackets the address it finds in `-c CONFIG` (upstream
/// builds `http://::1:PORT`). Where the machine has no IPv6 loopback, the test says so.
#[test]
fn management_on_ipv6_tcp() {
    let probe = match std::net::TcpListener::bind("[::1]:0") {
        Ok(l) => l,
        Err(e) => {
            eprintln!("no IPv6 loopback here ({e}); not checked");
            return;
        }
    };
    let port = probe.local_addr().expect("addr").port();
    drop(probe);
    let r =
        common::start(&Setup::new("api-tcp6").management(&format!("  interface: '::1@{port}'\n")))
            .expect("start");
    let url = format!("http://[::1]:{port}");
    for args in [
        vec![
            "-s",
            url.as_str(),
            "config",
            "get",
            "--json",
            "-p",
            "/workers",
        ],
        vec![
            "-c",
            r.config.to_str().expect("UTF-8"),
            "config",
            "get",
            "--json",
            "-p",
            "/workers",
        ],
    ] {
        let out = std::process::Command::new(common::KRESCTL)
            .args(&args)
            .output()
            .expect("kresctl");
        assert!(out.status.success(), "{args:?}: {out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1", "{args:?}");
    }
    stop(r);
}
