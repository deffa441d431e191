//! `kresctl upstreams` on real kresd: a forward target is listed as configured and, after
//! queries through it, with the round-trip times kresd measured to it and the queries it
//! answered; a dead forward target with its queries all unanswered and no round-trip time;
//! the Prometheus text has the same figures.

mod common;
mod exposition;

use std::time::Duration;

use common::{Setup, DNS_TIMEOUT};
use serde_json::Value;
use testbed::dns;

/// How long a query under the dead target may take: kresd answers SERVFAIL as soon as it sees
/// the refusal, at the latest when its own resolution limit (10 s) is spent retrying.
const DEAD_FORWARD_TIMEOUT: Duration = Duration::from_secs(15);

#[test]
fn a_forward_target_is_listed_with_its_measured_rtt() {
    // The forward target: a second resolver answering `up.test` from its local data.
    let target = common::start(&Setup::new("upstreams-target").extra(
        "local-data:\n  records: |\n    a.up.test. 60 A 192.0.2.7\n    b.up.test. 60 A 192.0.2.8\n",
    ))
    .expect("target");
    let server = format!("127.0.0.1@{}", target.port);
    // A dead target: a loopback address and port that refuses every query.
    let dead_upstream = dns::DeadUpstream::bind("127.0.0.2:0").expect("dead upstream");
    let dead = format!("127.0.0.2@{}", dead_upstream.address.port());
    // A refusing target: a socket of this test answering REFUSED to everything.
    let (refusing, refuser) = dns::refusing_upstream("127.0.0.3:0").expect("refusing upstream");
    let refusing_server = format!("127.0.0.3@{}", refusing.port());
    let r = common::start(&Setup::new("upstreams").workers(2).extra(&format!(
        "forward:\n  - subtree: up.test\n    servers: ['{server}']\n    options: {{dnssec: false}}\n  - subtree: dead.test\n    servers: ['{dead}']\n    options: {{dnssec: false}}\n  - subtree: refused.test\n    servers: ['{refusing_server}']\n    options: {{dnssec: false}}\n"
    )))
    .expect("resolver");
    let upstreams = |r: &common::Resolver| -> Value {
        let out = r.kresctl(&["upstreams", "--json"]).expect("kresctl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    // The first look loads kresd's `stats`, which records upstreams from then on.
    upstreams(&r);
    // Names not asked before go to the target (whose answers the workers then cache): ask
    // new ones until a sample shows.
    let mut asked = 0;
    let mut last = Value::Null;
    let listed = testbed::wait_for("the target listed", Duration::from_secs(20), || {
        for _ in 0..4 {
            let name = format!("n{asked}.up.test.");
            asked += 1;
            dns::query_udp(r.dns(), &name, dns::TYPE_A, DNS_TIMEOUT).expect("answer");
        }
        last = upstreams(&r);
        // kresd names an upstream by its address alone (no port).
        Ok(row_of(&last, "127.0.0.1"))
    })
    .unwrap_or_else(|e| panic!("{e}: {last:#}"));
    assert_eq!(last["forwards"][0]["subtrees"][0], "up.test");
    assert_eq!(last["forwards"][0]["servers"][0], server.as_str());
    eprintln!("listed: {listed}");
    assert!(listed["samples"].as_u64() >= Some(1), "{listed}");
    assert!(
        listed["rtt_avg_ms"].as_f64().is_some_and(|ms| ms >= 0.0),
        "{listed}"
    );
    // The workers counted the queries they sent and the answers (every one since they began
    // counting at the first look, so at least the samples kresd holds), none an error.
    let count =
        |a: &Value, field: &str| a[field].as_u64().unwrap_or_else(|| panic!("{field}: {a}"));
    assert!(
        count(&listed, "answered") >= count(&listed, "samples"),
        "{listed}"
    );
    assert!(
        count(&listed, "queries") >= count(&listed, "answered"),
        "{listed}"
    );
    assert_eq!(count(&listed, "error_answers"), 0, "{listed}");
    // A name under the dead target: kresd retries until it gives up with a SERVFAIL. The
    // target is then listed with every query it was sent unanswered and no round-trip time.
    let servfail =
        dns::query_udp(r.dns(), "x.dead.test.", dns::TYPE_A, DEAD_FORWARD_TIMEOUT).expect("answer");
    assert_eq!(servfail.rcode, dns::RCODE_SERVFAIL);
    let u = upstreams(&r);
    let dead_listed =
        row_of(&u, "127.0.0.2").unwrap_or_else(|| panic!("the dead target is not listed: {u:#}"));
    eprintln!("dead: {dead_listed}");
    assert!(count(&dead_listed, "queries") >= 1, "{dead_listed}");
    assert_eq!(
        count(&dead_listed, "unanswered"),
        count(&dead_listed, "queries"),
        "{dead_listed}"
    );
    assert_eq!(count(&dead_listed, "answered"), 0, "{dead_listed}");
    assert_eq!(count(&dead_listed, "samples"), 0, "{dead_listed}");
    assert!(dead_listed["rtt_avg_ms"].is_null(), "{dead_listed}");
    // A name under the refusing target (kresd passes the REFUSED on, or gives up with a
    // SERVFAIL): its answers are counted as errors.
    let refusal = dns::query_udp(
        r.dns(),
        "stop.refused.test.",
        dns::TYPE_A,
        DEAD_FORWARD_TIMEOUT,
    )
    .expect("answer");
    assert_ne!(refusal.rcode, 0, "an error answer");
    let refused = refuser.join().expect("refuser");
    let u = upstreams(&r);
    let find = |address: &str| {
        row_of(&u, address).unwrap_or_else(|| panic!("{address} is not listed: {u:#}"))
    };
    let refusing_listed = find("127.0.0.3");
    eprintln!("refusing ({refused} refused): {refusing_listed}");
    assert!(
        count(&refusing_listed, "error_answers") >= 1,
        "{refusing_listed}"
    );
    assert!(
        count(&refusing_listed, "error_answers") <= refused,
        "{refusing_listed}"
    );
    assert_eq!(
        count(&refusing_listed, "error_answers"),
        count(&refusing_listed, "answered"),
        "{refusing_listed}"
    );
    let listed = find("127.0.0.1");
    let dead_listed = find("127.0.0.2");
    // The Prometheus text: the same address with the same samples and mean, in seconds.
    let scrape = r
        .http("GET", "/metrics/prometheus", b"")
        .expect("GET /metrics/prometheus");
    assert_eq!(scrape.status, 200);
    let parsed = exposition::parse(&scrape.text()).unwrap_or_else(|e| panic!("{e}"));
    let address = [("address", "127.0.0.1")];
    assert_eq!(
        parsed.value("knot_resolver_upstream_rtt_samples", &address),
        listed["samples"].as_f64(),
        "{}",
        scrape.text()
    );
    let rtt = parsed
        .value("knot_resolver_upstream_rtt_seconds", &address)
        .expect("an RTT series");
    let listed_rtt = listed["rtt_avg_ms"].as_f64().expect("rtt") / 1e3;
    assert!(
        (rtt - listed_rtt).abs() <= 1e-9 * listed_rtt.max(1.0),
        "{rtt} {listed_rtt}"
    );
    assert!(parsed.value("knot_resolver_upstream_addresses", &[]) >= Some(2.0));
    // The dead target's tallies, as listed (nothing asked since); no RTT series of it.
    let dead_address = [("address", "127.0.0.2")];
    for (series, field) in [
        ("knot_resolver_upstream_queries_total", "queries"),
        ("knot_resolver_upstream_unanswered_total", "unanswered"),
        (
            "knot_resolver_upstream_error_answers_total",
            "error_answers",
        ),
    ] {
        assert_eq!(
            parsed.value(series, &dead_address),
            dead_listed[field].as_f64(),
            "{series}: {}",
            scrape.text()
        );
    }
    assert_eq!(
        parsed.value("knot_resolver_upstream_rtt_seconds", &dead_address),
        None
    );
    let text = r.kresctl(&["upstreams"]).expect("kresctl");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!("forward up.test -> {server}")),
        "{text}"
    );
    assert!(
        text.contains(&format!("forward dead.test -> {dead}")),
        "{text}"
    );
    assert!(text.contains("UNANSWERED"), "{text}");
    // The tallies say since when they count: the workers' first look, before this one.
    assert!(
        text.contains("ERRORS counted since ") && text.contains(" ago; "),
        "{text}"
    );
    let json = r.kresctl(&["upstreams", "--json"]).expect("kresctl");
    let json: Value = serde_json::from_slice(&json.stdout).expect("JSON");
    let since = json["counted_since"].as_f64().expect("counted_since");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    assert!(since <= now && now - since < 3600.0, "{since} at {now}");
    let a = dns::query_udp(r.dns(), "a.up.test.", dns::TYPE_A, DNS_TIMEOUT).expect("answer");
    assert_eq!(a.a(), [std::net::Ipv4Addr::new(192, 0, 2, 7)]);
    r.stop();
    target.stop();
}

/// The row of `address` in a `kresctl upstreams --json` answer.
fn row_of(u: &Value, address: &str) -> Option<Value> {
    u["addresses"]
        .as_array()?
        .iter()
        .find(|a| a["address"] == address)
        .cloned()
}
