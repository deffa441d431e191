//! Metrics and cache clearing end to end: real kresd workers, real queries, the API over the
//! unix socket and kresctl. The Prometheus text is read by a strict reader of the format
//! (`exposition`), and the control plane's series are read back after real changes, a refusal
//! and a worker killed.

mod common;
mod exposition;

use std::time::Duration;

use common::{Setup, DNS_TIMEOUT, STOP_TIMEOUT};
use nix::sys::signal::Signal;
use serde_json::{json, Value};
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
    // Every family once, both workers' samples under it: Prometheus's parser takes it.
    let parsed = exposition::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(
        parsed.families["resolver_response_latency"].samples.len(),
        2 * 11,
        "both workers' buckets, count and sum under one header"
    );
    // The labelled families say what upstream's names say, by label.
    let total = |name: &str, labels: &[(&str, &str)]| -> f64 {
        parsed
            .samples(name)
            .iter()
            .filter(|s| labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
            .map(|s| s.value)
            .sum()
    };
    let udp4 = total("resolver_request_udp4_total", &[]);
    assert!(udp4 >= QUERIES as f64, "udp4 {udp4}");
    assert_eq!(
        total(
            "knot_resolver_dns_requests_total",
            &[("protocol", "udp"), ("family", "ipv4")]
        ),
        udp4
    );
    assert_eq!(
        total("knot_resolver_dns_answers_total", &[("rcode", "NOERROR")]),
        total("resolver_answer_rcode_noerror_total", &[])
            + total("resolver_answer_rcode_nodata_total", &[])
    );
    assert_eq!(
        total("knot_resolver_dns_response_duration_seconds_count", &[]),
        total("resolver_response_latency_count", &[])
    );
    assert_eq!(
        total("knot_resolver_cache_hits_total", &[]),
        total("resolver_answer_cached_total", &[])
    );
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

/// How long a series may take to show what the events said (the tally follows the event
/// log on the manager's own runtime).
const SETTLE: Duration = Duration::from_secs(60);

/// Scrape `/metrics/prometheus` until `ready` holds for what it reads (strictly parsed); the
/// last reading.
fn scrape_until(
    r: &common::Resolver,
    what: &str,
    ready: impl Fn(&exposition::Parsed) -> bool,
) -> exposition::Parsed {
    let mut last = String::new();
    testbed::wait_for(what, SETTLE, || {
        let resp = r
            .http("GET", "/metrics/prometheus", b"")
            .expect("GET /metrics/prometheus");
        assert_eq!(resp.status, 200, "{}", resp.text());
        last = resp.text();
        let parsed = exposition::parse(&last).unwrap_or_else(|e| panic!("{e}\n{last}"));
        Ok(ready(&parsed).then_some(parsed))
    })
    .unwrap_or_else(|e| panic!("{e}: never showed:\n{last}"))
}

/// The value of the one sample `name` with `labels`, 0 when there is none yet.
fn value(p: &exposition::Parsed, name: &str, labels: &[(&str, &str)]) -> f64 {
    p.value(name, labels).unwrap_or(0.0)
}

#[test]
fn control_plane_series_follow_changes_refusals_and_restarts() {
    let r = common::start(&Setup::new("metrics-control").workers(2).extra(RECORDS))
        .expect("resolver starts");
    // The tally follows the event log on its own task: the start is counted once it has
    // read the start's events, not at the first scrape.
    let start = scrape_until(&r, "two workers ready and the start tallied", |p| {
        value(p, "knot_resolver_workers_ready", &[]) == 2.0
            && value(p, "knot_resolver_manager_incarnations_total", &[]) > 0.0
            && value(p, "knot_resolver_config_generation", &[]) > 0.0
    });
    assert_eq!(
        value(
            &start,
            "knot_resolver_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
    assert_eq!(value(&start, "knot_resolver_workers_configured", &[]), 2.0);
    assert_eq!(
        value(&start, "knot_resolver_manager_incarnations_total", &[]),
        1.0
    );
    assert_eq!(value(&start, "knot_resolver_config_generation", &[]), 1.0);
    let etag = |p: &exposition::Parsed| {
        let info = p.samples("knot_resolver_config_info");
        assert_eq!(info.len(), 1, "one running configuration");
        info[0].label("etag").expect("etag label").to_owned()
    };
    let served = r.http("GET", "/v1/config", b"").expect("GET /v1/config");
    let served_tag = served
        .header("etag")
        .expect("ETag")
        .trim_matches('"')
        .to_owned();
    assert_eq!(etag(&start), served_tag);
    let loader_runs = value(
        &start,
        "knot_resolver_policy_loader_duration_seconds_count",
        &[],
    );

    // Applied: new local data, the workers reset their rules after a policy-loader run.
    let resp = r.put_json(
        "/local-data",
        json!({"records": "n.test. 300 A 192.0.2.6\n"}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let applied = [("cause", "api"), ("result", "rules_reset")];
    let after = scrape_until(&r, "the applied change", |p| {
        value(p, "knot_resolver_config_changes_total", &applied) == 1.0
    });
    assert_eq!(value(&after, "knot_resolver_config_generation", &[]), 2.0);
    assert_ne!(etag(&after), served_tag, "the new configuration's tag");
    assert!(
        value(
            &after,
            "knot_resolver_policy_loader_duration_seconds_count",
            &[]
        ) > loader_runs,
        "the policy-loader ran and was timed"
    );

    // Refused by the canary: counted, nothing else changes.
    let resp = r.put_json("/lua", json!({"script": "error('refuse this')"}));
    assert_eq!(resp.status, 400, "{}", resp.text());
    let refused = scrape_until(&r, "the refused change", |p| {
        value(
            p,
            "knot_resolver_config_changes_total",
            &[("cause", "api"), ("result", "refused")],
        ) == 1.0
    });
    assert_eq!(value(&refused, "knot_resolver_config_generation", &[]), 2.0);

    // A reload: the files bring the first local data back; counted and timed.
    let out = r.kresctl(&["reload"]).expect("kresctl reload");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reloaded = scrape_until(&r, "the reload", |p| {
        value(
            p,
            "knot_resolver_config_change_duration_seconds_count",
            &[("cause", "reload")],
        ) == 1.0
    });
    assert_eq!(
        value(
            &reloaded,
            "knot_resolver_config_changes_total",
            &[("cause", "reload"), ("result", "rules_reset")]
        ),
        1.0
    );
    assert_eq!(
        value(&reloaded, "knot_resolver_config_generation", &[]),
        3.0
    );
    assert_eq!(
        etag(&reloaded),
        served_tag,
        "back on the files' configuration"
    );

    // A worker killed: one restart of a kresd by a signal, and both workers ready again.
    let pids = r.pids_named("kresd");
    assert_eq!(pids.len(), 2, "{pids:?}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pids[0]), Signal::SIGKILL).expect("kill");
    let restarted = scrape_until(&r, "the restart", |p| {
        value(
            p,
            "knot_resolver_process_restarts_total",
            &[("kind", "kresd"), ("reason", "signal")],
        ) == 1.0
            && value(p, "knot_resolver_workers_ready", &[]) == 2.0
    });
    let restarts: f64 = restarted
        .samples("knot_resolver_process_restarts_total")
        .iter()
        .map(|s| s.value)
        .sum();
    assert_eq!(restarts, 1.0, "that restart only, every other series at 0");
    assert_eq!(
        value(
            &start,
            "knot_resolver_process_restarts_total",
            &[("kind", "kresd"), ("reason", "signal")],
        ),
        0.0,
        "written from 0 on"
    );
    assert!(
        start
            .samples("knot_resolver_process_restarts_total")
            .iter()
            .any(|s| s.label("kind") == Some("kresd") && s.label("reason") == Some("signal")),
        "the kresd restart series exist before any restart"
    );
    r.stop();
}

/// Evaluate a Lua expression in worker `id` through its control socket.
fn control(r: &common::Resolver, id: u32, expr: &str) -> Value {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let path = r.dir.host(&format!("run/control/{id}"));
    rt.block_on(kres_daemon::control::command(
        &path,
        expr,
        std::time::Duration::from_secs(10),
    ))
    .expect("control command")
}

/// Lua that makes a worker count the control commands it evaluates (kresd hands each to the
/// global `eval_cmd`), leaving out the manager's liveness probe (`1`) and this test's own
/// commands (which name the count).
const COUNT_COMMANDS: &str = "(function() if commands_counted == nil then \
    commands_counted = 0; local eval = eval_cmd; \
    eval_cmd = function(line, mode) \
    if line ~= '1' and not line:find('commands_counted', 1, true) then \
    commands_counted = commands_counted + 1 end; return eval(line, mode) end end; \
    return commands_counted end)()";

/// Every read of the workers' statistics is one control-socket round: each worker is asked
/// once per scrape, whatever the scrape shows (the statistics, their labelled families, the
/// upstreams' samples and tallies).
#[test]
fn each_scrape_asks_each_worker_once() {
    const WORKERS: u32 = 2;
    let r = common::start(&Setup::new("metrics-rounds").workers(WORKERS).extra(RECORDS))
        .expect("resolver starts");
    let counted = |r: &common::Resolver| -> Vec<u64> {
        (0..WORKERS)
            .map(|id| control(r, id, COUNT_COMMANDS).as_u64().expect("a count"))
            .collect()
    };
    assert_eq!(counted(&r), [0, 0], "nothing counted before");
    for path in [
        "/metrics/prometheus",
        "/metrics/json",
        "/upstreams",
        "/metrics/prometheus",
    ] {
        let before = counted(&r);
        let resp = r.http("GET", path, b"").expect("scrape");
        assert_eq!(resp.status, 200, "{path}: {}", resp.text());
        let after = counted(&r);
        let asked: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        assert_eq!(asked, [1, 1], "commands per worker for GET {path}");
    }
    // The one round brought everything: the statistics and the upstream tallies.
    let text = r
        .http("GET", "/metrics/prometheus", b"")
        .expect("scrape")
        .text();
    assert!(
        text.contains("resolver_metrics_loaded{instance_id=\"kresd:kresd1\"} 1.0"),
        "{text}"
    );
    assert!(text.contains("knot_resolver_dns_queries_total{"), "{text}");
    assert!(text.contains("knot_resolver_upstream_addresses "), "{text}");
    r.stop();
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

/// An authoritative server on a free port for `signed.test` (knotd signs it at load) and
/// `unsigned.test` (not signed), with the signed zone's key-signing key.
struct Authoritative {
    /// Its port on 127.0.0.1.
    port: u16,
    /// `257 3 13 <key>`: the DNSKEY rdata of `signed.test`'s key-signing key.
    ksk: String,
    /// knotd itself, killed when this is dropped.
    _knotd: testbed::Launched,
}

fn start_authoritative(bed: &'static testbed::Bed) -> Authoritative {
    let dir = bed.test_dir("metrics-knotd").expect("dir");
    let port = testbed::free_port().expect("port");
    let mut zones = String::new();
    for (zone, address, signing) in [
        ("signed.test", "192.0.2.61", "on"),
        ("unsigned.test", "192.0.2.62", "off"),
    ] {
        testbed::write(
            &dir.host(&format!("{zone}.zone")),
            &format!(
                "$ORIGIN {zone}.\n$TTL 3600\n@ SOA ns admin 1 3600 900 604800 60\n@ NS ns\nns A 127.0.0.1\nwww A {address}\n"
            ),
        )
        .expect("zone file");
        zones.push_str(&format!(
            "  - domain: {zone}\n    file: {}\n    dnssec-signing: {signing}\n    zonefile-sync: -1\n",
            dir.bed(&format!("{zone}.zone")).display()
        ));
    }
    std::fs::create_dir_all(dir.host("db")).expect("db dir");
    let db = dir.bed("db");
    testbed::write(
        &dir.host("knot.conf"),
        &format!(
            "server:\n  listen: 127.0.0.1@{port}\n  rundir: {db}\nlog:\n  - target: stderr\n    any: info\ndatabase:\n  storage: {db}\nzone:\n{zones}",
            db = db.display()
        ),
    )
    .expect("knot.conf");
    let knotd = bed
        .launch_installed(
            std::path::Path::new("/usr/sbin/knotd"),
            &[std::ffi::OsStr::new("-c"), dir.bed("knot.conf").as_os_str()],
            &[],
        )
        .expect("launch knotd");
    knotd
        .output
        .wait_for_count("loaded, serial", 2, common::START_TIMEOUT)
        .expect("knotd loaded both zones");
    let port_arg = port.to_string();
    let keys = bed
        .run_installed(
            "/usr/bin/kdig",
            &[
                "+short",
                "@127.0.0.1",
                "-p",
                &port_arg,
                "signed.test.",
                "DNSKEY",
            ],
        )
        .expect("kdig");
    let ksk = testbed::short_answers(&keys)
        .into_iter()
        .find(|k| k.starts_with("257 "))
        .unwrap_or_else(|| panic!("no key-signing key: {keys:?}"));
    Authoritative {
        port,
        ksk,
        _knotd: knotd,
    }
}

/// Ask `name` of type `qtype` from source address `from`, with EDNS, and return the rcode.
fn rcode_from(
    from: std::net::Ipv4Addr,
    server: std::net::SocketAddr,
    name: &str,
    qtype: u16,
) -> u8 {
    let sock = std::net::UdpSocket::bind((from, 0)).expect("bind");
    sock.set_read_timeout(Some(DNS_TIMEOUT)).expect("timeout");
    sock.connect(server).expect("connect");
    let query = dns::encode_query(0x4d51, name, qtype, true).expect("query");
    sock.send(&query).expect("send");
    let mut buf = [0u8; 4096];
    let n = sock.recv(&mut buf).expect("an answer");
    dns::parse_response(&buf[..n]).expect("parses").rcode
}

/// The answer counters of the workers' generated Lua, loaded at the first collection (the
/// default `monitoring.metrics: lazy`): exact counts of known queries by qtype, rcode, cache
/// use and DNSSEC outcome, the JSON left as upstream's.
#[test]
fn answer_counts_by_qtype_rcode_cache_and_dnssec() {
    let bed = testbed::Bed::get().expect("bed");
    let auth = start_authoritative(bed);
    let extra = format!(
        "{RECORDS}views:\n  - subnets: [127.0.0.2/32]\n    answer: refused\nforward:\n  - subtree: [signed.test, unsigned.test]\n    servers: ['127.0.0.1@{port}']\n    options: {{authoritative: false, dnssec: true}}\ndnssec:\n  trust-anchors:\n    - 'signed.test. 3600 DNSKEY {ksk}'\n    - 'unsigned.test. 3600 DNSKEY {ksk}'\n",
        port = auth.port,
        ksk = auth.ksk
    );
    let r = common::start(&Setup::new("metrics-counts").extra(&extra)).expect("resolver starts");
    let first = scrape_until(&r, "the counters loaded", |p| {
        !p.samples("knot_resolver_dns_queries_total").is_empty()
    });
    let total = |p: &exposition::Parsed, name: &str| -> f64 {
        p.samples(name).iter().map(|s| s.value).sum()
    };
    assert_eq!(total(&first, "knot_resolver_dns_queries_total"), 0.0);
    assert_eq!(total(&first, "knot_resolver_dns_answers_total"), 0.0);

    let local = std::net::Ipv4Addr::LOCALHOST;
    let asked = [
        ("m.test.", dns::TYPE_A, dns::RCODE_NOERROR),
        ("m.test.", dns::TYPE_AAAA, dns::RCODE_NOERROR),
        ("m.test.", dns::TYPE_TXT, dns::RCODE_NOERROR),
        ("m.test.", 65280, dns::RCODE_NOERROR),
        ("nx.test.", dns::TYPE_A, dns::RCODE_NXDOMAIN),
        ("www.signed.test.", dns::TYPE_A, dns::RCODE_NOERROR),
        ("www.signed.test.", dns::TYPE_A, dns::RCODE_NOERROR),
        ("www.unsigned.test.", dns::TYPE_A, dns::RCODE_SERVFAIL),
    ];
    for (name, qtype, rcode) in asked {
        assert_eq!(
            rcode_from(local, r.dns(), name, qtype),
            rcode,
            "{name} {qtype}"
        );
    }
    let refused_source = std::net::Ipv4Addr::new(127, 0, 0, 2);
    assert_eq!(
        rcode_from(refused_source, r.dns(), "m.test.", dns::TYPE_A),
        dns::RCODE_REFUSED
    );
    // Without EDNS: the rcode from the header alone.
    let plain = dns::query_udp(r.dns(), "m.test.", dns::TYPE_A, DNS_TIMEOUT).expect("answer");
    assert_eq!(plain.rcode, dns::RCODE_NOERROR);

    let resp = r
        .http("GET", "/metrics/prometheus", b"")
        .expect("GET /metrics/prometheus");
    let text = resp.text();
    let p = exposition::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let id = ("instance_id", "kresd:kresd0");
    let by = |name: &str, label: &str, values: &[(&str, f64)]| {
        for (value, expected) in values {
            assert_eq!(
                p.value(name, &[id, (label, value)]),
                Some(*expected),
                "{name}{{{label}=\"{value}\"}}\n{text}"
            );
        }
        let sum: f64 = values.iter().map(|(_, v)| v).sum();
        assert_eq!(
            total(&p, name),
            sum,
            "{name}: no other sample counts\n{text}"
        );
    };
    by(
        "knot_resolver_dns_queries_total",
        "qtype",
        &[
            ("A", 7.0),
            ("AAAA", 1.0),
            ("TXT", 1.0),
            ("other", 1.0),
            ("MX", 0.0),
        ],
    );
    by(
        "knot_resolver_dns_answers_total",
        "rcode",
        &[
            ("NOERROR", 7.0),
            ("NXDOMAIN", 1.0),
            ("SERVFAIL", 1.0),
            ("REFUSED", 1.0),
            ("FORMERR", 0.0),
            ("other", 0.0),
        ],
    );
    // As kresd's statistics tell the cache: local data and the built-in empty `test.` zone
    // are answered as from the cache (the four `m.test.` and `nx.test.`, and the plain
    // `m.test.` again), and the second signed answer came from it: 7 hits. Misses: the first
    // signed answer came from knotd, the bogus one ended in a query the cache did not answer,
    // the refusal came from the view.
    assert_eq!(
        p.value("knot_resolver_cache_hits_total", &[id]),
        Some(7.0),
        "{text}"
    );
    assert_eq!(
        p.value("knot_resolver_cache_misses_total", &[id]),
        Some(3.0),
        "{text}"
    );
    // Secure: the signed zone's answers and the local A record (twice; kresd trusts its local
    // data, and its answers with no record in them are not marked secure); bogus: the zone
    // with a trust anchor and no signatures; insecure: the rest.
    by(
        "knot_resolver_dnssec_answers_total",
        "result",
        &[("secure", 4.0), ("bogus", 1.0), ("insecure", 5.0)],
    );

    // Prometheus's own linter has nothing to say about the text.
    testbed::write(&r.dir.host("scrape.txt"), &text).expect("scrape file");
    let lint = format!(
        "promtool check metrics < {}",
        r.dir.bed("scrape.txt").display()
    );
    let out = bed
        .run_installed("/bin/sh", &["-c", &lint])
        .expect("promtool");
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // The JSON stays upstream's: the statistics only.
    let json = r
        .http("GET", "/metrics/json", b"")
        .expect("GET /metrics/json");
    let json: Value = serde_json::from_slice(&json.body).expect("JSON");
    let worker = json["kresd:kresd0"].as_object().expect("worker statistics");
    assert!(
        worker.contains_key("answer") && !worker.contains_key("counts"),
        "{json}"
    );
    r.stop();
}
