//! Metrics and cache clearing end to end: real kresd workers, real queries, the API over the
//! unix socket and kresctl.

mod common;

use common::{Setup, DNS_TIMEOUT, STOP_TIMEOUT};
use nix::sys::signal::Signal;
use serde_json::Value;
use testbed::dns;

const RECORDS: &str = "local-data:\n  records: |\n    m.test. 300 A 192.0.2.5\n";

fn leaves(v: &Value) -> usize {
    match v {
        Value::Object(m) => m.values().map(leaves).sum(),
        Value::Array(a) => a.iter().map(leaves).sum(),
        _ => 1,
    }
}

#[test]
fn metrics_carry_real_counters_in_json_and_prometheus() {
    let mut r =
        common::start(&Setup::new("metrics").workers(2).extra(RECORDS)).expect("resolver starts");
    // With the default `metrics: lazy`, kresd's stats module loads on the first scrape, so
    // only queries after it count (upstream behaves the same).
    let first = r.http("GET", "/metrics/json", b"").expect("first scrape");
    assert_eq!(first.status, 200, "{}", first.text());
    const QUERIES: u64 = 20;
    for _ in 0..QUERIES {
        let resp = dns::query_udp(r.dns(), "m.test.", dns::TYPE_A, DNS_TIMEOUT).expect("answer");
        assert_eq!(resp.a().len(), 1);
    }

    let out = r.kresctl(&["metrics"]).expect("kresctl metrics");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).expect("JSON metrics");
    let workers = json.as_object().expect("object keyed by worker");
    assert_eq!(
        workers.keys().cloned().collect::<Vec<_>>(),
        vec!["kresd:kresd0", "kresd:kresd1"]
    );
    let udp: u64 = workers
        .values()
        .map(|w| w["request"]["udp"].as_u64().expect("udp counter"))
        .sum();
    assert!(udp >= QUERIES, "udp requests {udp} < {QUERIES}");

    let out = r
        .kresctl(&["metrics", "--prometheus"])
        .expect("kresctl metrics --prometheus");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let sum: f64 = text
        .lines()
        .filter(|l| l.starts_with("resolver_request_udp_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(sum >= QUERIES as f64, "prometheus udp {sum}");
    assert!(
        text.contains("resolver_metrics_loaded{instance_id=\"kresd:kresd1\"} 1.0"),
        "{text}"
    );
    assert!(
        text.contains("kres_supervisor_process_ready{name=\"kresd0\",kind=\"kresd\"} 1.0"),
        "{text}"
    );
    assert!(text.contains("process_resident_memory_bytes "), "{text}");
    // Upstream's packaging check: resolver* samples = JSON leaves + 2 per worker.
    let samples = text.lines().filter(|l| l.starts_with("resolver")).count();
    let json_body = r
        .http("GET", "/metrics/json", b"")
        .expect("GET /metrics/json");
    let json_again: Value = serde_json::from_slice(&json_body.body).expect("json");
    assert_eq!(samples, leaves(&json_again) + 2 * 2, "{text}");

    // /metrics redirects to the JSON.
    let redirect = r.http("GET", "/metrics", b"").expect("GET /metrics");
    assert_eq!(redirect.status, 301);
    assert_eq!(redirect.header("location"), Some("/metrics/json"));

    r.launched.signal(Signal::SIGINT).expect("signal");
    assert_eq!(r.launched.wait(STOP_TIMEOUT).expect("exit").code(), Some(0));
}

/// Evaluate a Lua expression in worker `id` through its control socket.
fn control(r: &common::Resolver, id: u32, expr: &str) -> Value {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let path = r.dir.host(&format!("run/control/{id}"));
    rt.block_on(knot_resolver::control::command(
        &path,
        expr,
        std::time::Duration::from_secs(10),
    ))
    .expect("control command")
}

/// Put an A record for `name` into the shared cache through worker 0.
fn insert(r: &common::Resolver, name: &str) {
    let expr = format!(
        "(function() local rr = kres.rrset(kres.str2dname('{name}'), kres.type.A, kres.class.IN, 300); rr:add_rdata('\\192\\000\\002\\001', 4); local c = kres.context().cache; local ret = ffi.C.kr_cache_insert_rr(c, rr, nil, 32, os.time(), false); ffi.C.kr_cache_commit(c); return ret end)()"
    );
    assert_eq!(control(r, 0, &expr), 0, "insert {name}");
}

#[test]
fn cache_clear_empties_the_cache() {
    let mut r = common::start(&Setup::new("cache-clear").workers(2)).expect("resolver starts");
    insert(&r, "c.test.");
    insert(&r, "d.test.");
    let before = control(&r, 1, "cache.count()").as_u64().expect("count");
    assert!(
        before >= 2,
        "the other worker sees the shared cache: {before}"
    );

    let out = r
        .kresctl(&["cache", "clear", "--json"])
        .expect("kresctl cache clear");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).expect("JSON result");
    assert!(result["count"].as_u64().is_some_and(|c| c >= 2), "{result}");
    assert_eq!(
        control(&r, 1, "cache.count()"),
        0,
        "cache empty after clear"
    );
    let again = r
        .kresctl(&["cache", "clear", "--json"])
        .expect("second clear");
    let again: Value = serde_json::from_slice(&again.stdout).expect("JSON result");
    assert_eq!(again["count"], 0);

    // An exact name with a type clears that record only (upstream's packaging test form).
    insert(&r, "c.test.");
    insert(&r, "d.test.");
    let out = r
        .kresctl(&[
            "cache",
            "clear",
            "--json",
            "--exact-name",
            "--rr-type",
            "A",
            "c.test.",
        ])
        .expect("clear exact");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(result["count"], 1, "{result}");
    assert_eq!(control(&r, 1, "cache.count()"), 1, "d.test. stays");
    // Invalid requests are refused locally, with exit code 1, and by the API with 400.
    let out = r
        .kresctl(&["cache", "clear", "--rr-type", "AAAA", "example.com."])
        .expect("invalid clear");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("exact-name"));
    let resp = r
        .http("POST", "/cache/clear", br#"{"rr-type": "A"}"#)
        .expect("POST");
    assert_eq!(resp.status, 400, "{}", resp.text());

    r.launched.signal(Signal::SIGINT).expect("signal");
    assert_eq!(r.launched.wait(STOP_TIMEOUT).expect("exit").code(), Some(0));
}
