//! `kresctl upstreams` on real kresd: a forward target is listed as configured and, after
//! queries through it, with the round-trip times kresd measured to it; the Prometheus text
//! has the same figures.

mod common;
mod exposition;

use std::time::{Duration, Instant};

use common::{Setup, DNS_TIMEOUT};
use serde_json::Value;
use testbed::dns;

#[test]
fn a_forward_target_is_listed_with_its_measured_rtt() {
    // The forward target: a second resolver answering `up.test` from its local data.
    let target = common::start(&Setup::new("upstreams-target").extra(
        "local-data:\n  records: |\n    a.up.test. 60 A 192.0.2.7\n    b.up.test. 60 A 192.0.2.8\n",
    ))
    .expect("target");
    let server = format!("127.0.0.1@{}", target.port);
    let r = common::start(&Setup::new("upstreams").workers(2).extra(&format!(
        "forward:\n  - subtree: up.test\n    servers: ['{server}']\n    options: {{dnssec: false}}\n"
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
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut asked = 0;
    let listed = loop {
        for _ in 0..4 {
            let name = format!("n{asked}.up.test.");
            asked += 1;
            dns::query_udp(r.dns(), &name, dns::TYPE_A, DNS_TIMEOUT).expect("answer");
        }
        let u = upstreams(&r);
        // kresd names an upstream by its address alone (no port).
        let found = u["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["address"] == "127.0.0.1")
            .cloned();
        if let Some(found) = found {
            assert_eq!(u["forwards"][0]["subtrees"][0], "up.test");
            assert_eq!(u["forwards"][0]["servers"][0], server.as_str());
            break found;
        }
        assert!(Instant::now() < deadline, "the target never listed: {u:#}");
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("listed: {listed}");
    assert!(listed["samples"].as_u64() >= Some(1), "{listed}");
    assert!(
        listed["rtt_avg_ms"].as_f64().is_some_and(|ms| ms >= 0.0),
        "{listed}"
    );
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
    assert!(parsed.value("knot_resolver_upstream_addresses", &[]) >= Some(1.0));
    let text = r.kresctl(&["upstreams"]).expect("kresctl");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!("forward up.test -> {server}")),
        "{text}"
    );
    let a = dns::query_udp(r.dns(), "a.up.test.", dns::TYPE_A, DNS_TIMEOUT).expect("answer");
    assert_eq!(a.a(), [std::net::Ipv4Addr::new(192, 0, 2, 7)]);
    r.stop();
    target.stop();
}
