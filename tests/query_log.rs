//! The query log end to end on real kresd: our Lua layer in each worker sends every answer as
//! a record to the manager process, whose ring answers `kresctl top` and `kresctl querylog`;
//! clients are the loopback addresses 127.0.0.2 … 127.0.0.9 asking known numbers of queries.
//! Every field of a record is checked against kresd's own answer, a hostile name included. A
//! stopped or killed reader costs log entries, counted by the workers, and never an answer.
//! Upstream's `logging.dnstap` goes from kresd straight to the operator's collector, the log
//! on or not.
//!
//! Also the configuration (`monitoring.query-log`) and the Lua it renders, without a bed.

mod common;
mod dnstap;
mod exposition;

use std::io::{Read, Write};
use std::net::IpAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{Resolver, Setup, DNS_TIMEOUT};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use testbed::dns;
use testbed::load::{Load, LoadSpec};

/// How long the log may take to show what was answered (a generous bound, never a figure).
const SETTLE: Duration = Duration::from_secs(30);

/// The port of `dead.test`'s forward: held for the whole run, refusing every query.
fn dead_port() -> u16 {
    static DEAD: OnceLock<dns::DeadUpstream> = OnceLock::new();
    DEAD.get_or_init(|| dns::DeadUpstream::bind("127.0.0.1:0").expect("dead upstream"))
        .address
        .port()
}

/// A resolver with the query log on (`more`: further lines of `monitoring.query-log`), local
/// data under `qlog.test` and a forward of `dead.test` to a loopback port that refuses every query.
fn resolver(name: &'static str, more: &str) -> Resolver {
    common::start(&setup(name, more)).expect("start")
}

/// The setup of [`resolver`].
fn setup(name: &'static str, more: &str) -> Setup {
    setup_with(name, more, "")
}

/// [`setup`] with further `forward` rules (`forwards`: list items).
fn setup_with(name: &'static str, more: &str, forwards: &str) -> Setup {
    let dead = dead_port();
    let extra = format!(
        "monitoring:\n  query-log:\n    enabled: true\n{more}local-data:\n  records: |\n    a.qlog.test. 60 A 192.0.2.1\n    b.qlog.test. 60 A 192.0.2.2\n    c.qlog.test. 60 A 192.0.2.3\n    a.qlog.test. 60 AAAA 2001:db8::1\n    load.qlog.test. 60 A 192.0.2.9\n    marker.qlog.test. 60 A 192.0.2.10\nforward:\n  - subtree: dead.test\n    servers: ['127.0.0.1@{dead}']\n    options: {{dnssec: false}}\n{forwards}"
    );
    Setup::new(name).extra(&extra)
}

fn client(i: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, i])
}

fn ask(r: &Resolver, from: IpAddr, name: &str, qtype: u16) -> dns::Response {
    dns::query_udp_from(from, r.dns(), name, qtype, DNS_TIMEOUT).expect("answer")
}

/// How long a query under the dead forward may take: kresd answers SERVFAIL as soon as it sees
/// the refusal (under a millisecond on an idle machine), at the latest when its own resolution
/// limit (10 s, `KR_RESOLVE_TIME_LIMIT`) is spent retrying. The forward validates nothing:
/// with DNSSEC on, kresd would first ask the root servers for their keys, which a loopback-only
/// bed never answers, and only give up at that limit.
const DEAD_FORWARD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// `name` asked from `from` under the dead forward: its SERVFAIL.
fn ask_dead(r: &Resolver, from: IpAddr, name: &str) -> dns::Response {
    dns::query_udp_from(from, r.dns(), name, dns::TYPE_A, DEAD_FORWARD_TIMEOUT).expect("answer")
}

/// `kresctl ARGS` as JSON.
fn kresctl_json(r: &Resolver, args: &[&str]) -> Value {
    let out = r.kresctl(args).expect("kresctl");
    assert!(
        out.status.success(),
        "kresctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// `GET path` as JSON.
fn get(r: &Resolver, path: &str) -> Value {
    let resp = r.http("GET", path, b"").expect("GET");
    assert_eq!(resp.status, 200, "{path}: {}", resp.text());
    serde_json::from_slice(&resp.body).expect("JSON")
}

/// The Prometheus text, read strictly.
fn scrape(r: &Resolver) -> exposition::Parsed {
    let resp = r
        .http("GET", "/metrics/prometheus", b"")
        .expect("GET /metrics/prometheus");
    assert_eq!(resp.status, 200, "{}", resp.text());
    exposition::parse(&resp.text()).unwrap_or_else(|e| panic!("{e}\n{}", resp.text()))
}

/// Poll the log's status until `done` accepts it (within [`SETTLE`]).
fn wait_status(r: &Resolver, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    testbed::wait_for(what, SETTLE, || {
        let status = get(r, "/query-log/status");
        Ok(done(&status).then_some(status))
    })
    .unwrap_or_else(|e| panic!("{e}: {}", get(r, "/query-log/status")))
}

/// A top list as (key, count) pairs.
fn pairs(list: &Value) -> Vec<(String, u64)> {
    list["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            (
                e["key"].as_str().expect("key").to_owned(),
                e["count"].as_u64().expect("count"),
            )
        })
        .collect()
}

/// The (client, name, qtype, rcode) of the answers of a `querylog --json`.
fn rows(answers: &Value) -> Vec<(String, String, String, String)> {
    answers
        .as_array()
        .expect("array")
        .iter()
        .map(|a| {
            let s = |k: &str| a[k].as_str().expect(k).to_owned();
            (s("client"), s("name"), s("qtype"), s("rcode"))
        })
        .collect()
}

#[test]
fn top_lists_and_filters_count_real_answers() {
    let r = resolver("qlog-top", "");
    // 127.0.0.(2+k) asks 9-k times (9, 8, … 2: 44 answers), cycling through a, b, c.qlog.test A.
    let names = ["a.qlog.test.", "b.qlog.test.", "c.qlog.test."];
    for i in 2..=9u8 {
        for q in 0..(11 - i) {
            let resp = ask(&r, client(i), names[usize::from(q) % 3], dns::TYPE_A);
            assert_eq!(resp.rcode, dns::RCODE_NOERROR);
        }
    }
    // Three AAAA from 127.0.0.9; three SERVFAILs from 127.0.0.8 under the dead forward.
    for _ in 0..3 {
        ask(&r, client(9), "a.qlog.test.", dns::TYPE_AAAA);
    }
    for name in ["x.dead.test.", "x.dead.test.", "y.dead.test."] {
        assert_eq!(ask_dead(&r, client(8), name).rcode, dns::RCODE_SERVFAIL);
    }
    let status = wait_status(&r, "50 answers logged", |s| {
        s["received"].as_u64() >= Some(50)
    });
    // The Prometheus text counts them too (nothing more was asked since).
    let metrics = scrape(&r);
    let value = |name: &str| metrics.value(name, &[]);
    assert_eq!(value("knot_resolver_query_log_enabled"), Some(1.0));
    assert_eq!(
        value("knot_resolver_query_log_answers_received_total"),
        status["received"].as_f64()
    );
    assert_eq!(value("knot_resolver_query_log_entries"), Some(50.0));
    assert_eq!(
        value("knot_resolver_query_log_capacity_entries"),
        Some(10_000.0)
    );
    assert_eq!(
        value("knot_resolver_query_log_datagrams_malformed_total"),
        Some(0.0)
    );
    assert_eq!(
        value("knot_resolver_query_log_answers_missed_total"),
        Some(0.0)
    );

    // Clients: 127.0.0.8 asked 3 + 3, 127.0.0.9 2 + 3; ties by address.
    let clients = kresctl_json(&r, &["top", "clients", "--json", "--limit", "8"]);
    let expected: Vec<(String, u64)> = [
        ("127.0.0.2", 9),
        ("127.0.0.3", 8),
        ("127.0.0.4", 7),
        ("127.0.0.5", 6),
        ("127.0.0.8", 6),
        ("127.0.0.6", 5),
        ("127.0.0.9", 5),
        ("127.0.0.7", 4),
    ]
    .iter()
    .map(|(k, c)| ((*k).to_owned(), *c))
    .collect();
    assert_eq!(pairs(&clients), expected);
    assert_eq!(clients["counted"], 50);

    // Names: each client's q-th query asked names[q % 3]: a 3+3+3+2+2+2+1+1 = 17 (+3 AAAA),
    // b 3+3+2+2+2+1+1+1 = 15, c 3+2+2+2+1+1+1+0 = 12.
    let top_names = kresctl_json(&r, &["top", "names", "--json", "--limit", "3"]);
    assert_eq!(
        pairs(&top_names),
        vec![
            ("a.qlog.test.".to_owned(), 20),
            ("b.qlog.test.".to_owned(), 15),
            ("c.qlog.test.".to_owned(), 12),
        ]
    );
    let servfail = kresctl_json(&r, &["top", "servfail", "--json"]);
    assert_eq!(
        pairs(&servfail),
        vec![
            ("x.dead.test.".to_owned(), 2),
            ("y.dead.test.".to_owned(), 1)
        ]
    );
    let qtypes = kresctl_json(&r, &["top", "qtypes", "--json"]);
    assert_eq!(
        pairs(&qtypes),
        vec![("A".to_owned(), 47), ("AAAA".to_owned(), 3)]
    );
    // A window of an hour holds them all; the bogus list has none.
    let windowed = kresctl_json(&r, &["top", "clients", "--json", "--window", "1h"]);
    assert_eq!(windowed["counted"], 50);
    assert_eq!(
        kresctl_json(&r, &["top", "bogus", "--json"])["entries"],
        json!([])
    );

    // The query log, filtered by client, suffix, type and rcode.
    let of_9 = kresctl_json(&r, &["querylog", "--json", "--client", "127.0.0.9"]);
    assert_eq!(of_9.as_array().map(Vec::len), Some(5));
    let aaaa = kresctl_json(&r, &["querylog", "--json", "--qtype", "AAAA"]);
    assert_eq!(
        rows(&aaaa),
        vec![
            (
                "127.0.0.9".into(),
                "a.qlog.test.".into(),
                "AAAA".into(),
                "NOERROR".into()
            );
            3
        ]
    );
    let dead = kresctl_json(
        &r,
        &[
            "querylog",
            "--json",
            "--name",
            "dead.test",
            "--rcode",
            "servfail",
        ],
    );
    assert_eq!(
        rows(&dead),
        vec![
            (
                "127.0.0.8".into(),
                "x.dead.test.".into(),
                "A".into(),
                "SERVFAIL".into()
            ),
            (
                "127.0.0.8".into(),
                "x.dead.test.".into(),
                "A".into(),
                "SERVFAIL".into()
            ),
            (
                "127.0.0.8".into(),
                "y.dead.test.".into(),
                "A".into(),
                "SERVFAIL".into()
            ),
        ]
    );
    let net = kresctl_json(
        &r,
        &[
            "querylog",
            "--json",
            "--client",
            "127.0.0.0/29",
            "--name",
            "b.qlog.test",
            "--limit",
            "2",
        ],
    );
    // 127.0.0.0/29 holds .2 … .7; of their b answers the newest two are .6's and .7's.
    assert_eq!(
        rows(&net).iter().map(|r| r.0.as_str()).collect::<Vec<_>>(),
        ["127.0.0.6", "127.0.0.7"]
    );
    // Every answer has a latency and an answer count.
    let one = &kresctl_json(
        &r,
        &[
            "querylog",
            "--json",
            "--client",
            "127.0.0.2",
            "--limit",
            "1",
        ],
    )[0];
    assert!(one["latency_ms"].as_f64().is_some(), "{one}");
    assert_eq!(one["answers"], 1);
    assert_eq!(one["transport"], "udp");

    // Bad filters are named.
    let out = r
        .kresctl(&["querylog", "--client", "300.1.2.3"])
        .expect("kresctl");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("'300.1.2.3'"));
    let out = r
        .kresctl(&["top", "names", "--window", "soon"])
        .expect("kresctl");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("window: 'soon'"));
    r.stop();
}

#[test]
fn client_addresses_can_be_kept_as_prefixes() {
    let r = resolver("qlog-prefix", "    ipv4-prefix: 24\n");
    ask(&r, client(7), "a.qlog.test.", dns::TYPE_A);
    ask(&r, client(9), "a.qlog.test.", dns::TYPE_A);
    wait_status(&r, "2 answers", |s| s["received"].as_u64() >= Some(2));
    let clients = kresctl_json(&r, &["top", "clients", "--json"]);
    assert_eq!(pairs(&clients), vec![("127.0.0.0".to_owned(), 2)]);
    r.stop();
}

/// A batch of records as a worker sends it (`query_log::records`): worker `worker`, each
/// record an answer to `name` (wire form) A for 192.0.2.1.
fn batch(worker: u32, names: &[Vec<u8>]) -> Vec<u8> {
    use kres_daemon::query_log::records::{BATCH_HEADER, MAGIC, RECORD_HEADER};
    let mut b = vec![0u8; BATCH_HEADER];
    b[0..4].copy_from_slice(&MAGIC.to_ne_bytes());
    b[4..8].copy_from_slice(&worker.to_ne_bytes());
    b[8..12].copy_from_slice(&(names.len() as u32).to_ne_bytes());
    for name in names {
        let mut r = vec![0u8; RECORD_HEADER];
        r[8..12].copy_from_slice(&u32::MAX.to_ne_bytes());
        r[14..16].copy_from_slice(&1u16.to_ne_bytes());
        r[20..24].copy_from_slice(&(-1i32).to_ne_bytes());
        r[24..28].copy_from_slice(&[192, 0, 2, 1]);
        r[40] = 4;
        r[41] = 1;
        r[43] = name.len() as u8;
        r.extend_from_slice(name);
        r.resize(r.len().next_multiple_of(8), 0);
        b.extend(r);
    }
    b
}

/// Send `datagrams` to the log's socket as root (an admitted sender); how many got in (a full
/// receive buffer refuses some: what gets in is what is tested).
fn send_datagrams(r: &Resolver, datagrams: impl IntoIterator<Item = Vec<u8>>) -> u64 {
    let socket = std::os::unix::net::UnixDatagram::unbound().expect("socket");
    let path = r.dir.host("run/query-log.sock");
    let mut sent = 0;
    for datagram in datagrams {
        if socket.send_to(&datagram, &path).is_ok() {
            sent += 1;
        }
    }
    sent
}

/// Hostile datagrams on the log's socket (any process of the workers' user can send there):
/// empty, short, of another magic, oversized, records cut, of unknown families or with names
/// that are no names, and 100,000 records each claiming another worker. The manager reads
/// past them, counts what it did not read, takes no claim of a process that is no worker,
/// stays the same process, and the worker's own answers are logged as before.
#[test]
fn hostile_datagrams_cost_nothing_but_themselves() {
    let r = resolver("qlog-hostile-datagrams", "");
    let manager = manager_pid(&r);
    ask(&r, client(2), "a.qlog.test.", dns::TYPE_A);
    wait_status(&r, "the worker's answer logged", |s| {
        s["received"].as_u64() >= Some(1)
    });
    let rss_before = rss_kib(manager);
    let x_test = b"\x01x\x04test\x00".to_vec();
    let mut cut = batch(0, std::slice::from_ref(&x_test));
    cut.truncate(cut.len() - 12);
    let mut bad_family = batch(0, std::slice::from_ref(&x_test));
    bad_family[24 + 40] = 9;
    let garbage: Vec<Vec<u8>> = vec![
        vec![],
        vec![4],
        vec![0xff; 23],
        vec![0xab; 60_000],
        cut,
        bad_family,
        batch(0, &[b"\x05a\x00".to_vec()]),
        batch(0, &[b"\xc0\x0c".to_vec()]),
    ];
    let sent = send_datagrams(&r, garbage);
    assert!(sent >= 4, "only {sent} datagrams got in");
    wait_status(&r, "the garbage counted", |s| {
        s["malformed"].as_u64() >= Some(sent)
    });
    // 100,000 records of distinct workers, 250 a batch.
    let claims = (0..400u32).map(|b| {
        let mut datagram = batch(1000 + b, &vec![x_test.clone(); 250]);
        datagram[16..24].copy_from_slice(&1u64.to_ne_bytes());
        datagram
    });
    let sent = send_datagrams(&r, claims);
    assert!(sent > 5, "only {sent} batches got in");
    // A batch is its sender's: the test is no worker, so its records have no worker and
    // its claims of dropped answers are not taken; only the one worker is counted.
    let status = get(&r, "/query-log/status");
    assert_eq!(
        status["workers_counted"].as_u64(),
        Some(1),
        "only the workers' own dropped counts: {status}"
    );
    wait_status(&r, "the forged records logged", |_| {
        get(&r, "/query-log?name=x.test.&limit=1")
            .as_array()
            .is_some_and(|a| !a.is_empty())
    });
    let forged = get(&r, "/query-log?name=x.test.&limit=3");
    let forged = forged.as_array().expect("entries");
    assert!(
        forged.iter().all(|e| e["worker"].is_null()),
        "no worker for what no worker sent: {forged:?}"
    );
    let rss_after = rss_kib(manager);
    eprintln!("manager RSS: {rss_before} KiB before, {rss_after} KiB after the hostile datagrams");
    // The worker's own answers go on.
    ask(&r, client(6), "marker.qlog.test.", dns::TYPE_A);
    wait_status(&r, "the marker logged", |_| {
        let logged = kresctl_json(&r, &["querylog", "--json", "--client", "127.0.0.6"]);
        logged.as_array().map(Vec::len) == Some(1)
    });
    let marker = kresctl_json(&r, &["querylog", "--json", "--client", "127.0.0.6"]);
    assert_eq!(marker[0]["worker"], "kresd0", "the worker's own: {marker}");
    assert_eq!(manager_pid(&r), manager, "the same manager process");
    r.stop();
}

/// The EDE of a DNS message (`domain` reads it), if it has one.
fn ede_of(wire: &[u8]) -> Option<u16> {
    use domain::base::opt::ExtendedError;
    let msg = domain::base::Message::from_octets(wire).expect("a DNS message");
    msg.opt().and_then(|opt| {
        opt.opt()
            .iter::<ExtendedError<_>>()
            .flatten()
            .next()
            .map(|e| e.code().to_int())
    })
}

/// Ask `name` (wire form) from `from` with EDNS: kresd's answer as it came.
fn ask_raw(r: &Resolver, from: IpAddr, name: &[u8], qtype: u16) -> Vec<u8> {
    let socket = std::net::UdpSocket::bind((from, 0)).expect("bind");
    socket
        .set_read_timeout(Some(DEAD_FORWARD_TIMEOUT))
        .expect("timeout");
    socket.connect(r.dns()).expect("connect");
    socket
        .send(&dns::encode_query_wire(0x4242, name, qtype, true))
        .expect("send");
    let mut buf = vec![0u8; 65535];
    let n = socket.recv(&mut buf).expect("an answer");
    buf.truncate(n);
    buf
}

/// Every field of a record, against kresd's own answers: the client, the transport (UDP and
/// TCP), a name of hostile bytes in wire form (a dot, NUL, 0xff, a space, a backslash and a
/// quote within labels, upper case) shown escaped and lowercase, the type, the rcode, the
/// answer count, the EDE (an answer with one and one without), the cache use, the times.
#[test]
fn every_field_of_an_answer_is_logged_as_kresd_gave_it() {
    let r = resolver("qlog-fields", "");
    let hostile = dns::wire_name(&[b"A.B", b"\x00\xff \\\"", b"dead", b"test"]).expect("name");
    let servfail = ask_raw(&r, client(5), &hostile, dns::TYPE_AAAA);
    let a = ask_raw(&r, client(5), b"\x01a\x04qlog\x04test\x00", dns::TYPE_A);
    let nxdomain = dns::query_tcp(r.dns(), "nothing.qlog.test.", dns::TYPE_A, DNS_TIMEOUT);
    let nxdomain = nxdomain.expect("an answer over TCP");
    let logged = wait_status(&r, "three answers logged", |_| {
        kresctl_json(&r, &["querylog", "--json"])
            .as_array()
            .map_or(0, Vec::len)
            >= 3
    });
    let _ = logged;
    let all = kresctl_json(&r, &["querylog", "--json"]);
    eprintln!("{all:#}");
    let all = all.as_array().expect("array");
    let find = |name: &str| {
        all.iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("{name} not logged: {all:#?}"))
    };
    let h = find("a\\.b.\\000\\255\\ \\\\\".dead.test.");
    let servfail_rcode = servfail[3] & 0x0f;
    assert_eq!(servfail_rcode, dns::RCODE_SERVFAIL);
    assert_eq!(
        (&h["client"], &h["transport"], &h["qtype"], &h["rcode"]),
        (
            &json!("127.0.0.5"),
            &json!("udp"),
            &json!("AAAA"),
            &json!("SERVFAIL")
        )
    );
    assert_eq!(h["answers"], 0);
    assert_eq!(h["ede"], json!(ede_of(&servfail)), "the EDE kresd sent");
    assert!(h["latency_ms"].as_f64().is_some(), "{h}");
    let e = find("a.qlog.test.");
    assert_eq!(
        (&e["client"], &e["transport"], &e["qtype"], &e["rcode"]),
        (
            &json!("127.0.0.5"),
            &json!("udp"),
            &json!("A"),
            &json!("NOERROR")
        )
    );
    assert_eq!(e["answers"], 1);
    assert_eq!(ede_of(&a), None);
    assert_eq!(e["ede"], Value::Null);
    assert!(e["cached"].is_boolean(), "{e}");
    let t = find("nothing.qlog.test.");
    assert_eq!(
        (&t["client"], &t["transport"], &t["rcode"]),
        (
            &json!("127.0.0.1"),
            &json!("tcp"),
            &json!(if nxdomain.rcode == dns::RCODE_NXDOMAIN {
                "NXDOMAIN"
            } else {
                "NOERROR"
            })
        )
    );
    assert_eq!(t["answers"], nxdomain.answers.len());
    // The times: answered within the last minute, after its start.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    let time = e["time"].as_f64().expect("time");
    assert!(time <= now && time > now - 60.0, "{time} at {now}");
    r.stop();
}

/// The manager process (the reader of the workers' records).
fn manager_pid(r: &Resolver) -> i32 {
    let pids = r.pids_named("kres-manager");
    assert_eq!(pids.len(), 1, "{:?}", r.launched.tree());
    pids[0]
}

/// Resident memory of `pid`, in KiB.
fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

#[test]
fn a_stopped_reader_costs_log_entries_never_answers() {
    let r = resolver("qlog-stopped", "");
    let manager = manager_pid(&r);
    ask(&r, client(2), "a.qlog.test.", dns::TYPE_A);
    wait_status(
        &r,
        "the first answer logged, the worker's misses counted",
        |s| s["workers_counted"].as_u64() >= Some(1) && s["received"].as_u64() >= Some(1),
    );
    let rss_before = rss_kib(manager);

    // 2,000 queries a second; the reader is stopped for 20,000 answers (10 s), then the load
    // goes on for 8,000 more (4 s).
    let rate = 2000;
    let mut spec = LoadSpec::new(r.dns(), rate, "load.qlog.test.");
    spec.max_queries = u64::from(rate) * 18;
    spec.max_duration = Duration::from_secs(40);
    let load = Load::start(spec.clone()).expect("load");
    assert!(load.wait_answers(4000, SETTLE), "load runs");
    kill(Pid::from_raw(manager), Signal::SIGSTOP).expect("SIGSTOP");
    let stopped_at = load.elapsed();
    let answered_at_stop = load.answered();
    let resumed = load.wait_answers(20_000, SETTLE);
    kill(Pid::from_raw(manager), Signal::SIGCONT).expect("SIGCONT");
    assert!(resumed, "answers went on while the reader was stopped");
    let resumed_at = load.elapsed();
    let answered_at_resume = load.answered();
    let ran_on = load.wait_answers(8_000, SETTLE);
    assert!(
        ran_on,
        "load runs on: {answered_at_stop} answered at the stop, {answered_at_resume} at the resume, {} now after {:.1?}",
        load.answered(),
        load.elapsed()
    );
    let report = load.stop();
    eprintln!("load: {report}");
    assert_eq!(report.lost, 0, "queries lost: {report}");
    assert_eq!(report.answered, report.sent);

    // The batches come back: an answer after the load reaches the log.
    ask(&r, client(3), "marker.qlog.test.", dns::TYPE_A);
    testbed::wait_for("the log to show the marker", SETTLE, || {
        let logged = kresctl_json(&r, &["querylog", "--json", "--name", "marker.qlog.test"]);
        Ok(logged
            .as_array()
            .is_some_and(|a| !a.is_empty())
            .then_some(()))
    })
    .expect("the marker logged");
    // Every answer is either received or counted as missed by the worker.
    let total = report.answered + 2;
    let status = wait_status(&r, "received + missed = answered", |s| {
        s["received"].as_u64().unwrap_or(0) + s["missed"].as_u64().unwrap_or(0) >= total
    });
    eprintln!("status after the stop: {status}");
    let missed = status["missed"].as_u64().unwrap_or(0);
    assert!(
        missed > 0,
        "a reader stopped for 20,000 answers missed none: {status}"
    );
    let accounted = status["received"].as_u64().unwrap_or(0) + missed;
    assert_eq!(accounted, total, "{status}");
    // The Prometheus text reads the same count, with the workers' other counters.
    assert_eq!(
        scrape(&r).value("knot_resolver_query_log_answers_missed_total", &[]),
        Some(missed as f64)
    );

    // Figures, not asserted: latency before, during and after the stop; the ring's memory;
    // `kresctl top` on a full ring.
    let window = |from: Duration, to: Duration| {
        report
            .latency(from, to)
            .map_or_else(|| "none".to_owned(), |p| p.to_string())
    };
    eprintln!(
        "latency before the stop: {}",
        window(Duration::ZERO, stopped_at)
    );
    eprintln!(
        "latency while stopped:   {}",
        window(stopped_at, resumed_at)
    );
    eprintln!(
        "latency after:           {}",
        window(resumed_at, report.elapsed)
    );
    let held = status["held"].as_u64().unwrap_or(0);
    eprintln!(
        "manager RSS: {rss_before} KiB before, {} KiB with {held} entries held",
        rss_kib(manager)
    );
    let began = Instant::now();
    let top = kresctl_json(&r, &["top", "names", "--json"]);
    eprintln!(
        "kresctl top names over {} entries: {:.1?}",
        top["counted"],
        began.elapsed()
    );
    r.stop();
}

/// The manager process killed under load (the supervisor starts a new one): the workers stay,
/// no query is lost, and the workers' batches reach the new reader.
#[test]
fn a_killed_reader_costs_log_entries_never_answers() {
    let r = resolver("qlog-killed", "");
    let manager = manager_pid(&r);
    let workers = r.pids_named("kresd");
    ask(&r, client(2), "a.qlog.test.", dns::TYPE_A);
    wait_status(&r, "the first answer logged", |s| {
        s["received"].as_u64() >= Some(1)
    });
    // 2,000 queries a second; the reader is killed after 4,000 answers, and the load goes on
    // for 12,000 more (6 s).
    let rate = 2000;
    let mut spec = LoadSpec::new(r.dns(), rate, "load.qlog.test.");
    spec.max_queries = u64::from(rate) * 10;
    spec.max_duration = Duration::from_secs(30);
    let load = Load::start(spec.clone()).expect("load");
    assert!(load.wait_answers(4000, SETTLE), "load runs");
    kill(Pid::from_raw(manager), Signal::SIGKILL).expect("SIGKILL");
    let killed_at = load.elapsed();
    let ran_on = load.wait_answers(12_000, SETTLE);
    assert!(
        ran_on,
        "load runs on after the kill: {} answered after {:.1?}",
        load.answered(),
        load.elapsed()
    );
    let report = load.stop();
    eprintln!("load: {report}");
    assert_eq!(report.lost, 0, "queries lost: {report}");
    assert_eq!(report.answered, report.sent);
    for (what, from, to) in [
        ("before the kill", Duration::ZERO, killed_at),
        ("after", killed_at, report.elapsed),
    ] {
        let p = report.latency(from, to);
        eprintln!(
            "latency {what}: {}",
            p.map_or("none".into(), |p| p.to_string())
        );
    }

    // A new manager process, the same workers, and the batches back: an answer asked now
    // reaches its log (the workers connect again at their next batch; what comes before is
    // dropped, not delayed, so the marker is asked again until one shows).
    r.launched
        .output
        .wait_for("serving the API again", common::START_TIMEOUT)
        .expect("a new manager process");
    assert_ne!(r.pids_named("kres-manager"), [manager]);
    assert_eq!(r.pids_named("kresd"), workers, "the workers stay");
    let mut asked = 0u64;
    testbed::wait_for(
        "the new reader to log the marker with its mark",
        SETTLE,
        || {
            let answer = ask(&r, client(3), "marker.qlog.test.", dns::TYPE_A);
            assert_eq!(answer.rcode, dns::RCODE_NOERROR);
            asked += 1;
            let out = r.kresctl(&["querylog", "--json", "--name", "marker.qlog.test"]);
            let marked = out.ok().filter(|o| o.status.success()).is_some_and(|o| {
                serde_json::from_slice::<Value>(&o.stdout)
                    .ok()
                    .and_then(|v| v.as_array().cloned())
                    .is_some_and(|a| a.iter().any(|e| e["cached"].is_boolean()))
            });
            Ok(marked.then_some(()))
        },
    )
    .unwrap_or_else(|e| panic!("{e} ({asked} asked)"));
    eprintln!("the batches were back after {asked} answers");
    r.stop();
}

/// Whether an answer came from the cache: a forwarded name asked twice is a miss, then a
/// hit; the text table says so too.
#[test]
fn answers_say_whether_they_came_from_the_cache() {
    let target = common::start(
        &Setup::new("qlog-cache-target")
            .extra("local-data:\n  records: |\n    n.up.test. 60 A 192.0.2.7\n"),
    )
    .expect("target");
    let forward = format!(
        "  - subtree: up.test\n    servers: ['127.0.0.1@{}']\n    options: {{dnssec: false}}\n",
        target.port
    );
    let r = common::start(&setup_with("qlog-cache", "", &forward)).expect("resolver");
    for _ in 0..2 {
        let a = ask(&r, client(4), "n.up.test.", dns::TYPE_A);
        assert_eq!(a.a(), [std::net::Ipv4Addr::new(192, 0, 2, 7)]);
    }
    ask(&r, client(4), "a.qlog.test.", dns::TYPE_A);
    let logged = testbed::wait_for("the three answers logged", SETTLE, || {
        let logged = kresctl_json(&r, &["querylog", "--json", "--client", "127.0.0.4"]);
        Ok((logged.as_array().map_or(0, Vec::len) == 3).then_some(logged))
    })
    .unwrap_or_else(|e| {
        let logged = kresctl_json(&r, &["querylog", "--json", "--client", "127.0.0.4"]);
        panic!("{e}: {logged:#}")
    });
    eprintln!("{logged:#}");
    let cached: Vec<(String, Value)> = logged
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["name"].as_str().unwrap_or_default().to_owned(),
                e["cached"].clone(),
            )
        })
        .collect();
    assert_eq!(
        cached[..2],
        [
            ("n.up.test.".to_owned(), json!(false)),
            ("n.up.test.".to_owned(), json!(true))
        ]
    );
    // Local data: answered as from the cache or not, by kresd's own account; said either way.
    assert!(cached[2].1.is_boolean(), "{cached:?}");
    let text = r
        .kresctl(&["querylog", "--client", "127.0.0.4"])
        .expect("kresctl");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("CACHE"), "{text}");
    let lines: Vec<&str> = text.lines().filter(|l| l.ends_with("n.up.test.")).collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].contains(" miss ") && lines[1].contains(" hit "),
        "{text}"
    );
    r.stop();
    target.stop();
}

#[test]
fn the_configuration_renders_our_layer_for_the_query_log() {
    use kres_config::{validate, PathChecks, ValidationContext};
    let ctx = ValidationContext {
        resolve_root: "/".into(),
        checks: PathChecks::Lenient,
        logtarget_arg: Default::default(),
    };
    let render = |doc: Value| {
        let cfg = validate(&doc, &ctx).expect("valid");
        kres_lua::render_worker(&cfg)
    };
    let off = render(json!({"rundir": "/run/kr"}));
    assert!(!off.contains("dnstap"), "off by default");
    assert!(!off.contains("query-log.sock"), "{off}");
    let on = render(json!({"rundir": "/run/kr", "monitoring": {"query-log": {"enabled": true}}}));
    assert!(!on.contains("dnstap"), "the log loads no dnstap: {on}");
    assert!(
        on.contains("ffi.copy(sun.path, '/run/kr/query-log.sock')"),
        "{on}"
    );
    assert!(on.contains("load_query_log()"), "{on}");
    // With upstream's own dnstap too, kresd's stream goes to the operator's socket as upstream
    // renders it, and the log has its layer beside it.
    let both = render(json!({
        "rundir": "/run/kr",
        "monitoring": {"query-log": {"enabled": true}},
        "logging": {"dnstap": {"enable": true, "unix-socket": "/run/tap.sock", "log-tcp-rtt": true}}
    }));
    assert_eq!(both.matches("modules.load('dnstap')").count(), 1, "{both}");
    assert!(both.contains("socket_path = '/run/tap.sock'"), "{both}");
    assert!(both.contains("log_tcp_rtt = true"), "{both}");
    assert!(both.contains("'/run/kr/query-log.sock'"), "{both}");
    let tap_only = render(json!({
        "rundir": "/run/kr",
        "logging": {"dnstap": {"enable": true, "unix-socket": "/run/tap.sock"}}
    }));
    assert!(
        tap_only.contains("socket_path = '/run/tap.sock'"),
        "{tap_only}"
    );
    // Bounds are named.
    for (doc, path) in [
        (
            json!({"monitoring": {"query-log": {"entries": 0}}}),
            "/monitoring/query-log/entries",
        ),
        (
            json!({"monitoring": {"query-log": {"ipv4-prefix": 33}}}),
            "/monitoring/query-log/ipv4-prefix",
        ),
        (
            json!({"monitoring": {"query-log": {"size": 3}}}),
            "/monitoring/query-log",
        ),
        (
            json!({"monitoring": {"query-log": {"max-age": "500ms"}}}),
            "/monitoring/query-log/max-age",
        ),
        (
            json!({"monitoring": {"query-log": {"max-age": "soon"}}}),
            "/monitoring/query-log/max-age",
        ),
        (
            json!({"monitoring": {"query-log": {"max-memory": "512K"}}}),
            "/monitoring/query-log/max-memory",
        ),
    ] {
        let err = validate(&doc, &ctx).expect_err("invalid").to_string();
        assert!(err.contains(path), "{err}");
    }
}

#[test]
fn answers_are_followed_live() {
    let r = resolver("qlog-follow", "");
    let mut stream =
        testbed::http::EventStream::open(&r.api, "/query-log/stream?client=127.0.0.4&qtype=A", &[])
            .expect("stream");
    // kresctl follows the same stream, as JSON lines.
    let mut follower = std::process::Command::new(common::KRESCTL)
        .arg("-s")
        .arg(&r.api)
        .args(["querylog", "--follow", "--json", "--name", "b.qlog.test"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("kresctl");
    let stdout = follower.stdout.take().expect("stdout");
    let (lines_tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if lines_tx.send(line).is_err() {
                return;
            }
        }
    });
    // Until both followers are seen to receive (kresctl's stream opens on its own time).
    let deadline = Instant::now() + SETTLE;
    let followed = loop {
        ask(&r, client(3), "a.qlog.test.", dns::TYPE_A);
        ask(&r, client(4), "a.qlog.test.", dns::TYPE_AAAA);
        ask(&r, client(4), "b.qlog.test.", dns::TYPE_A);
        if let Ok(line) = lines.recv_timeout(Duration::from_millis(200)) {
            break line;
        }
        assert!(
            Instant::now() < deadline,
            "kresctl querylog --follow printed nothing"
        );
    };
    let followed: Value = serde_json::from_str(&followed).expect("a JSON line");
    assert_eq!(followed["name"], "b.qlog.test.");
    // Once following: one answer, and nothing after it to fill a batch, reaches kresctl
    // within a second (the worker sends a batch 50 ms old at the latest).
    while lines.recv_timeout(Duration::from_millis(300)).is_ok() {}
    let asked = Instant::now();
    ask(&r, client(4), "b.qlog.test.", dns::TYPE_A);
    let line = lines.recv_timeout(Duration::from_secs(1));
    eprintln!(
        "an answer reached kresctl querylog --follow after {:.1?}",
        asked.elapsed()
    );
    let line: Value = serde_json::from_str(&line.expect("followed within a second")).expect("JSON");
    assert_eq!(line["name"], "b.qlog.test.");
    // The API's stream passed only 127.0.0.4's A answers: b.qlog.test, every time.
    let message = stream.next(SETTLE).expect("stream").expect("a message");
    assert_eq!(message.event.as_deref(), Some("answer"));
    let answer: Value = serde_json::from_str(&message.data).expect("JSON");
    assert_eq!(
        (
            answer["client"].as_str(),
            answer["name"].as_str(),
            answer["qtype"].as_str()
        ),
        (Some("127.0.0.4"), Some("b.qlog.test."), Some("A"))
    );
    follower.kill().expect("kill");
    follower.wait().expect("wait");
    r.stop();
}

/// What the operator's dnstap consumer saw of one frame.
#[derive(Debug, Clone, PartialEq)]
enum Tapped {
    /// A client's query, from this client.
    Query(IpAddr),
    /// An answer to this client, of this name.
    Answer(IpAddr, String),
}

/// The operator's dnstap consumer on `listener`: shakes hands with the first connection and
/// reports every frame it reads (a frame that does not decode fails it).
fn tap_consumer(listener: std::os::unix::net::UnixListener) -> std::sync::mpsc::Receiver<Tapped> {
    use dnstap::{frames, message};
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            listener.set_nonblocking(true).expect("nonblocking");
            let listener = tokio::net::UnixListener::from_std(listener).expect("listener");
            let (mut stream, _) = listener.accept().await.expect("kresd connects");
            frames::accept(&mut stream).await.expect("handshake");
            while let Ok(Some(frame)) = frames::read_frame(&mut stream).await {
                match frame {
                    frames::Frame::Data(data) => {
                        assert!(!data.is_empty(), "an empty frame");
                        let tapped = match message::decode(&data).expect("a dnstap message") {
                            message::Decoded::Query { key, .. } => Tapped::Query(key.client),
                            message::Decoded::Response(r) => Tapped::Answer(r.key.client, r.name),
                        };
                        if tx.send(tapped).is_err() {
                            return;
                        }
                    }
                    frames::Frame::Control(c) if c.kind == frames::ControlKind::Stop => {
                        let _ = frames::finish(&mut stream).await;
                        return;
                    }
                    frames::Frame::Control(_) => {}
                }
            }
        });
    });
    rx
}

/// A resolver with the query log on and upstream's `logging.dnstap` to `tap` (bed's path).
fn resolver_with_tap(name: &'static str, tap: &std::path::Path) -> Resolver {
    common::start(&setup(name, "").logging(&format!(
        "  level: notice\n  dnstap:\n    enable: true\n    unix-socket: {}\n    log-queries: true\n    log-responses: true\n",
        tap.display()
    )))
    .expect("start")
}

/// Ask `name` from `from` until the consumer reports its answer (kresd connects on its own
/// time; what came before is kept for it or dropped, never waited for).
fn ask_until_tapped(
    r: &Resolver,
    tapped: &std::sync::mpsc::Receiver<Tapped>,
    from: IpAddr,
    name: &str,
) {
    let deadline = Instant::now() + SETTLE;
    loop {
        assert_eq!(ask(r, from, name, dns::TYPE_A).rcode, dns::RCODE_NOERROR);
        while let Ok(t) = tapped.recv_timeout(Duration::from_millis(100)) {
            if t == Tapped::Answer(from, name.to_owned()) {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the operator's socket never got {name}"
        );
    }
}

#[test]
fn the_operators_own_dnstap_socket_gets_kresds_stream_while_the_log_fills() {
    let bed = testbed::Bed::get().expect("bed");
    let dir = bed.test_dir("qlog-operator-tap").expect("dir");
    let listener = std::os::unix::net::UnixListener::bind(dir.host("tap.sock")).expect("bind");
    let tapped = tap_consumer(listener);
    let r = resolver_with_tap("qlog-operator", &dir.bed("tap.sock"));
    ask_until_tapped(&r, &tapped, client(6), "c.qlog.test.");

    // 20 queries from 127.0.0.7: the consumer gets each query and each answer, in order per
    // query; the query log counts them too.
    for _ in 0..20 {
        ask(&r, client(7), "b.qlog.test.", dns::TYPE_A);
    }
    let (mut queries, mut answers) = (0, 0);
    let deadline = Instant::now() + SETTLE;
    while queries < 20 || answers < 20 {
        let left = deadline.saturating_duration_since(Instant::now());
        match tapped.recv_timeout(left) {
            Ok(Tapped::Query(c)) if c == client(7) => queries += 1,
            Ok(Tapped::Answer(c, name)) if c == client(7) => {
                assert_eq!(name, "b.qlog.test.");
                answers += 1;
            }
            Ok(_) => {}
            Err(_) => panic!("the consumer got {queries} queries and {answers} answers of 20"),
        }
    }
    while let Ok(t) = tapped.recv_timeout(Duration::from_millis(500)) {
        assert!(
            !matches!(t, Tapped::Query(c) | Tapped::Answer(c, _) if c == client(7)),
            "a frame more than asked: {t:?}"
        );
    }
    wait_status(&r, "20 answers of 127.0.0.7 logged", |_| {
        let of_7 = kresctl_json(&r, &["querylog", "--json", "--client", "127.0.0.7"]);
        of_7.as_array().map(Vec::len) == Some(20)
    });
    let status = get(&r, "/query-log/status");
    assert_eq!(status["inactive_reason"], Value::Null, "{status}");
    assert_eq!(status["missed"], 0, "{status}");
    // The manager process is no party to it: kresd's stream is connected to the operator's
    // socket by a worker.
    let manager = manager_pid(&r);
    let fds = std::fs::read_dir(format!("/proc/{manager}/fd")).expect("fds");
    let tap = dir.host("tap.sock");
    assert!(
        fds.flatten()
            .all(|fd| std::fs::read_link(fd.path()).map_or(true, |l| l != tap)),
        "the manager holds the operator's socket"
    );
    r.stop();
}

/// Names of 250 bytes, each distinct (`i` in the first label), under `big.qlog.test`.
fn long_name(i: u32) -> String {
    let pad = "x".repeat(62);
    format!("n{i:0>61}.{pad}.{pad}.{}.big.qlog.test.", &pad[..46])
}

/// Send `names` to `server` as fast as it answers, `window` queries in flight; how many were
/// answered.
fn flood(server: std::net::SocketAddr, names: impl Iterator<Item = String>, window: usize) -> u64 {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket.connect(server).expect("connect");
    socket
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    let (mut in_flight, mut answered) = (0usize, 0u64);
    let mut buf = [0u8; 4096];
    for (id, name) in names.enumerate() {
        let query = dns::encode_query(id as u16, &name, dns::TYPE_A, false).expect("query");
        socket.send(&query).expect("send");
        in_flight += 1;
        while in_flight >= window {
            // An answer, or a loss after the timeout: either way its place is free again.
            if socket.recv(&mut buf).is_ok() {
                answered += 1;
            }
            in_flight -= 1;
        }
    }
    while in_flight > 0 && socket.recv(&mut buf).is_ok() {
        answered += 1;
        in_flight -= 1;
    }
    answered
}

/// A ring of 100,000 answers to 250-byte names, 64 connections asking for all of them and
/// reading a byte every 20 s, and 8 loops of `HEAD` of the same: the manager's memory stays
/// bounded (at most 4 lists of at most 8 MiB are made or sent at once, the rest are told 429;
/// a `HEAD` makes none), the slow readers are cut, `/livez` and DNS are answered throughout.
#[test]
fn slow_readers_of_a_full_ring_cannot_exhaust_the_manager() {
    let extra = "monitoring:\n  query-log:\n    enabled: true\n    entries: 100000\n\
                 local-data:\n  records: |\n    a.qlog.test. 60 A 192.0.2.1\n  rules:\n    \
                 - name: [big.qlog.test]\n      subtree: nxdomain\n";
    let r = common::start(&Setup::new("qlog-slow-readers").extra(extra)).expect("start");
    let manager = manager_pid(&r);
    let held = || -> u64 {
        let status =
            testbed::http::request(&r.api, "GET", "/query-log/status", &[], b"").expect("status");
        let status: Value = serde_json::from_slice(&status.body).expect("JSON");
        status["held"].as_u64().unwrap_or_default()
    };
    // In rounds of few queries in flight: kresd's dnstap queue drops what a flood brings
    // faster than the (debug-built) reader takes it, and an answer dropped is no entry.
    let mut sent = 0;
    testbed::wait_for("the ring to fill", Duration::from_secs(180), || {
        flood(r.dns(), (sent..sent + 5_000).map(long_name), 8);
        sent += 5_000;
        Ok((held() >= 90_000).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e}: {sent} sent, {} held", held()));
    let before = rss_kib(manager);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (statuses, mut livez, peak) = std::thread::scope(|scope| {
        let slow: Vec<_> = (0..64)
            .map(|_| {
                scope.spawn(|| {
                    let mut s = std::os::unix::net::UnixStream::connect(&r.api).expect("connect");
                    s.write_all(b"GET /query-log?limit=100000 HTTP/1.1\r\nHost: localhost\r\n\r\n")
                        .expect("ask");
                    let mut head = [0u8; 12];
                    s.read_exact(&mut head).expect("status line");
                    let status = String::from_utf8_lossy(&head[9..12]).into_owned();
                    let mut byte = [0u8; 1];
                    // A byte every 20 s, until cut or the test ends.
                    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                        let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
                        match s.read(&mut byte) {
                            Ok(0) => break,
                            _ => std::thread::sleep(Duration::from_millis(20)),
                        }
                    }
                    status
                })
            })
            .collect();
        for _ in 0..8 {
            scope.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let answer =
                        testbed::http::request(&r.api, "HEAD", "/query-log?limit=100000", &[], b"")
                            .expect("HEAD");
                    assert_eq!(answer.status, 200);
                    assert!(answer.body.is_empty());
                }
            });
        }
        // Probes, DNS and the manager's memory for 40 s: past the write deadline's window.
        let mut livez = Vec::new();
        let mut peak = before;
        let began = Instant::now();
        while began.elapsed() < Duration::from_secs(40) {
            let t = Instant::now();
            let probe = testbed::http::request(&r.api, "GET", "/livez", &[], b"").expect("livez");
            livez.push(t.elapsed());
            assert_eq!(probe.status, 200, "{}", probe.text());
            let a = dns::query_udp(r.dns(), "a.qlog.test.", dns::TYPE_A, DNS_TIMEOUT)
                .expect("DNS answered");
            assert_eq!(a.a().len(), 1);
            peak = peak.max(rss_kib(manager));
            std::thread::sleep(Duration::from_millis(200));
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let statuses: Vec<String> = slow
            .into_iter()
            .map(|h| h.join().expect("reader"))
            .collect();
        (statuses, livez, peak)
    });
    let served = statuses.iter().filter(|s| *s == "200").count();
    let refused = statuses.iter().filter(|s| *s == "429").count();
    assert_eq!(served + refused, 64, "{statuses:?}");
    assert!(served <= 4, "{served} lists made at once");
    livez.sort();
    let p99 = livez[livez.len() * 99 / 100];
    let growth_mib = peak.saturating_sub(before) / 1024;
    eprintln!(
        "manager RSS {} MiB before, peak growth {growth_mib} MiB; /livez p99 {:.1} ms over {} \
         probes; {served} lists served, {refused} told 429",
        before / 1024,
        p99.as_secs_f64() * 1e3,
        livez.len()
    );
    assert!(growth_mib < 256, "the manager grew by {growth_mib} MiB");
    // The slow readers were cut: their lists are gone, and new ones can be made.
    let answer =
        testbed::http::request(&r.api, "GET", "/query-log?limit=100000", &[], b"").expect("list");
    assert_eq!(answer.status, 200);
    let truncated: u64 = answer
        .header("query-log-truncated")
        .and_then(|v| v.parse().ok())
        .expect("the list of 100,000 long names is cut at 8 MiB");
    let list: Vec<Value> = serde_json::from_slice(&answer.body).expect("JSON");
    assert!(answer.body.len() <= 8 << 20);
    assert!(truncated > 0 && list.len() as u64 + truncated >= 90_000);
    r.stop();
}

/// The rundir's socket files of the query log.
fn log_sockets(r: &Resolver) -> [std::path::PathBuf; 1] {
    [r.dir.host("run/query-log.sock")]
}

/// What a process of uid and gid 65534 gets from `query-log.sock`, reached from the rundir
/// as its working directory (its ancestors need not be open to it): `denied` (the file's
/// mode) or `sent`.
fn connect_as_nobody(r: &Resolver) -> String {
    let script = r#"
import socket
d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
try:
    d.sendto(bytes(64), "query-log.sock")
    print("sent")
except PermissionError:
    print("denied")
"#;
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(["/usr/bin/python3", "-c", script])
        .current_dir(r.dir.host("run"))
        .output()
        .expect("setpriv python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn another_users_process_is_refused() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let r = resolver("qlog-peers", "");
    let run = r.dir.host("run");
    // The rundir searchable by others, as a rundir of mode 0755 is; the sockets are not.
    let run_mode = std::fs::metadata(&run)
        .expect("rundir")
        .permissions()
        .mode();
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(run_mode | 0o001))
        .expect("chmod rundir");
    for socket in log_sockets(&r) {
        let meta = std::fs::metadata(&socket).expect("socket");
        assert_eq!(
            (meta.mode() & 0o777, meta.uid()),
            (0o600, nix::unistd::geteuid().as_raw()),
            "{}",
            socket.display()
        );
    }
    assert_eq!(connect_as_nobody(&r), "denied", "the file's mode");
    // Opened to everyone, the sockets still refuse: the kernel's credentials are checked.
    for socket in log_sockets(&r) {
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    }
    assert_eq!(connect_as_nobody(&r), "sent", "the peer's uid");
    let status = wait_status(&r, "the datagram refused", |s| {
        s["refused_peers"].as_u64() >= Some(1)
    });
    assert_eq!(status["malformed"], 0, "refused unread: {status}");
    assert_eq!(
        scrape(&r).value("knot_resolver_query_log_peers_refused_total", &[]),
        status["refused_peers"].as_f64()
    );
    // The workers' own batches go on.
    ask(&r, client(5), "a.qlog.test.", dns::TYPE_A);
    wait_status(&r, "the answer logged", |s| s["held"].as_u64() >= Some(1));
    r.stop();
}

#[test]
fn the_log_off_binds_nothing_and_turned_off_empties_itself() {
    let r = resolver("qlog-off", "    max-age: 2s\n");
    // max-age: an answer is dropped once older.
    ask(&r, client(2), "a.qlog.test.", dns::TYPE_A);
    let status = wait_status(&r, "the answer logged", |s| s["held"].as_u64() >= Some(1));
    assert_eq!(status["max_age_seconds"].as_u64(), Some(2), "{status}");
    wait_status(&r, "the answer dropped at its age", |s| {
        s["held"].as_u64() == Some(0) && s["received"].as_u64() >= Some(1)
    });

    // Off: the sockets are gone, and the ring is empty.
    let resp = r.put_json("/monitoring/query-log/max-age", json!("1h"));
    assert!(resp.status < 300, "{}", resp.text());
    ask(&r, client(2), "b.qlog.test.", dns::TYPE_A);
    wait_status(&r, "the answer logged", |s| s["held"].as_u64() >= Some(1));
    let resp = r.put_json("/monitoring/query-log/enabled", json!(false));
    assert!(resp.status < 300, "{}", resp.text());
    let status = wait_status(&r, "off", |s| s["enabled"] == json!(false));
    assert_eq!(
        (status["held"].as_u64(), status["held_bytes"].as_u64()),
        (Some(0), Some(0)),
        "{status}"
    );
    for socket in log_sockets(&r) {
        assert!(!socket.exists(), "{} while off", socket.display());
    }
    ask(&r, client(3), "c.qlog.test.", dns::TYPE_A);
    assert_eq!(get(&r, "/query-log/status")["held"].as_u64(), Some(0));

    // On again: bound before the workers start, which send to it.
    let resp = r.put_json("/monitoring/query-log/enabled", json!(true));
    assert!(resp.status < 300, "{}", resp.text());
    for socket in log_sockets(&r) {
        assert!(socket.exists(), "{} while on", socket.display());
    }
    ask(&r, client(4), "a.qlog.test.", dns::TYPE_A);
    wait_status(&r, "the answer logged", |s| s["held"].as_u64() >= Some(1));
    r.stop();
}

#[test]
fn a_resolver_with_the_log_off_has_no_socket() {
    let setup = Setup::new("qlog-never")
        .extra("local-data:\n  records: |\n    a.qlog.test. 60 A 192.0.2.1\n");
    let r = common::start(&setup).expect("start");
    assert_eq!(
        ask(&r, client(2), "a.qlog.test.", dns::TYPE_A).rcode,
        dns::RCODE_NOERROR
    );
    for socket in log_sockets(&r) {
        assert!(!socket.exists(), "{}", socket.display());
    }
    r.stop();
}

/// The longest name there is (255 bytes on the wire), every byte one that is written
/// `\DDD` (about 1,000 characters), told apart by `n`.
fn hostile_name(n: u32) -> Vec<u8> {
    let mut wire = Vec::with_capacity(255);
    for (label, len) in [63u8, 63, 63, 61].into_iter().enumerate() {
        wire.push(len);
        for k in 0..u32::from(len) {
            let byte = 0x80 + (n.wrapping_add(k).wrapping_mul(7).wrapping_add(label as u32) % 0x7f);
            wire.push(byte as u8);
        }
    }
    wire.push(0);
    assert_eq!(wire.len(), 255);
    wire
}

#[test]
fn hostile_names_cost_what_the_ring_counts() {
    let r = resolver(
        "qlog-hostile-names",
        "    entries: 100000\n    max-memory: 1G\n",
    );
    let manager = manager_pid(&r);
    ask(&r, client(2), "a.qlog.test.", dns::TYPE_A);
    let before = wait_status(&r, "the worker's answer logged", |s| {
        s["held"].as_u64() >= Some(1)
    });
    let rss_before = rss_kib(manager);
    // 100,000 records of the longest hostile names, 50 a batch, sent by root (admitted).
    let entries = 100_000u32;
    let batches = (0..entries / 50).map(|b| {
        let names: Vec<Vec<u8>> = (0..50).map(|i| hostile_name(b * 50 + i)).collect();
        batch(900, &names)
    });
    assert_eq!(send_datagrams(&r, batches), u64::from(entries / 50));
    let received = before["received"].as_u64().unwrap_or(0) + u64::from(entries);
    let full = wait_status(&r, "every answer kept", |s| {
        s["received"].as_u64() >= Some(received)
    });
    let rss_full = rss_kib(manager);
    let held = full["held"].as_u64().unwrap_or(0);
    let held_bytes = full["held_bytes"].as_u64().unwrap_or(0);
    assert_eq!(
        held,
        u64::from(entries),
        "the worker's one gave way: {full}"
    );
    let name = &kresctl_json(&r, &["querylog", "--json", "--limit", "1"])[0]["name"];
    let name_len = name.as_str().map_or(0, str::len);
    assert!(name_len > 900, "escaped: {name}");
    let measured = (rss_full.saturating_sub(rss_before)) * 1024 / held;
    eprintln!(
        "{held} entries of {name_len}-character names: manager RSS {rss_before} → {rss_full} KiB, {measured} bytes an entry measured, {} counted",
        held_bytes / held
    );
    // The count is honest: the memory the entries took is not far above it.
    assert!(
        measured * 4 <= (held_bytes / held) * 5,
        "{measured} bytes an entry measured, {} counted",
        held_bytes / held
    );

    // A smaller max-memory applies at once; the oldest give way.
    let resp = r.put_json("/monitoring/query-log/max-memory", json!("8M"));
    assert!(resp.status < 300, "{}", resp.text());
    let cut = wait_status(&r, "the ring cut to 8M", |s| {
        s["max_memory"].as_u64() == Some(8 << 20)
    });
    assert!(cut["held_bytes"].as_u64() <= Some(8 << 20), "{cut}");
    // Every entry counts the same here (the longest names): 8M holds that many of them.
    let fit = (8u64 << 20) / (held_bytes / held);
    assert!(cut["held"].as_u64() <= Some(fit), "{cut}, {fit} fit");
    assert!(cut["held"].as_u64() < Some(u64::from(entries)), "{cut}");
    eprintln!("max-memory 8M: {cut}");
    r.stop();
}
