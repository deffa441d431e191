//! The query log end to end on real kresd: its dnstap module streams every answer to the
//! manager, whose ring answers `kresctl top` and `kresctl querylog`; clients are loopback
//! addresses 127.0.0.2 … 127.0.0.9 asking known numbers of queries.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use common::{Resolver, Setup, DNS_TIMEOUT};
use serde_json::Value;
use testbed::dns;

/// How long the log may take to show what was answered (a generous bound, never a figure).
const SETTLE: Duration = Duration::from_secs(20);

/// A resolver with the query log on, local data for `*.qlog.test` and a forward of
/// `dead.test` to a loopback port nobody answers on.
fn resolver(name: &'static str, workers: u32, more: &str) -> Resolver {
    let dead = testbed::free_port().expect("port");
    let extra = format!(
        "monitoring:\n  query-log:\n    enabled: true\n{more}local-data:\n  records: |\n    a.qlog.test. 60 A 192.0.2.1\n    b.qlog.test. 60 A 192.0.2.2\n    c.qlog.test. 60 A 192.0.2.3\n    a.qlog.test. 60 AAAA 2001:db8::1\nforward:\n  - subtree: dead.test\n    servers: ['127.0.0.1@{dead}']\n"
    );
    common::start(&Setup::new(name).workers(workers).extra(&extra)).expect("start")
}

fn client(i: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, i])
}

fn ask(r: &Resolver, from: IpAddr, name: &str, qtype: u16) -> dns::Response {
    dns::query_udp_from(from, r.dns(), name, qtype, DNS_TIMEOUT).expect("answer")
}

/// `GET path` as JSON.
fn get(r: &Resolver, path: &str) -> Value {
    let resp = r.http("GET", path, b"").expect("GET");
    assert_eq!(resp.status, 200, "{path}: {}", resp.text());
    serde_json::from_slice(&resp.body).expect("JSON")
}

/// Wait until the log has received `n` answers.
fn wait_received(r: &Resolver, n: u64) -> Value {
    let deadline = Instant::now() + SETTLE;
    loop {
        let status = get(r, "/query-log/status");
        if status["received"].as_u64() >= Some(n) {
            return status;
        }
        assert!(Instant::now() < deadline, "the log received {status} of {n}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn top_lists_and_filters_count_real_answers() {
    let r = resolver("qlog-top", 1, "");
    // 127.0.0.2 asks 9 times, 127.0.0.3 8 times, … 127.0.0.9 twice: 44 answers, each client
    // asking a.qlog.test A, then b, then c in turn.
    let names = ["a.qlog.test.", "b.qlog.test.", "c.qlog.test."];
    let mut sent = 0u64;
    for i in 2..=9u8 {
        for q in 0..(11 - i) {
            let resp = ask(&r, client(i), names[usize::from(q) % 3], dns::TYPE_A);
            assert_eq!(resp.rcode, dns::RCODE_NOERROR);
            sent += 1;
        }
    }
    // Three AAAA from 127.0.0.9, and SERVFAILs: two names under the dead forward.
    for _ in 0..3 {
        ask(&r, client(9), "a.qlog.test.", dns::TYPE_AAAA);
    }
    for name in ["x.dead.test.", "x.dead.test.", "y.dead.test."] {
        assert_eq!(ask(&r, client(8), name, dns::TYPE_A).rcode, dns::RCODE_SERVFAIL);
    }
    sent += 6;
    wait_received(&r, sent);

    let top = get(&r, "/top/clients?limit=8");
    let got: Vec<(String, u64)> = top["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["key"].as_str().unwrap().to_owned(), e["count"].as_u64().unwrap()))
        .collect();
    eprintln!("{top:#}");
    let _ = got;
    let log = get(&r, "/query-log?limit=5");
    eprintln!("{log:#}");
    r.stop();
}
