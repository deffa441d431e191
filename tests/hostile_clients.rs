//! Clients that misbehave against the real daemon: a client that never reads its answer, a
//! flood of connections, requests over TCP with a foreign `Host` or `Origin` or without the
//! bearer token. The resolver keeps answering DNS, the root stays small, and a stop is never
//! held up by a client.

mod common;

use std::io::{Read, Write};

use common::{Setup, DNS_TIMEOUT, STOP_TIMEOUT};
use nix::sys::signal::Signal;
use testbed::dns;

/// The root process's resident memory may not grow by more than this under hostile clients
/// (the root parses no request: it grows only by what its own work takes).
const ROOT_RSS_GROWTH_KIB: u64 = 4 * 1024;

/// One raw HTTP/1.1 exchange over TCP; the status code.
fn tcp_status(port: u16, head: &str) -> u16 {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(DNS_TIMEOUT * 6)).expect("timeout");
    s.write_all(head.as_bytes()).expect("write");
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"))
}

#[test]
fn tcp_requests_need_our_host_our_origin_and_the_token() {
    let port = testbed::free_port().expect("port");
    let bed = testbed::Bed::get().expect("bed");
    let token_dir = bed.test_dir("api-token").expect("dir");
    let token_file = token_dir.host("token");
    testbed::write(&token_file, "s3cret-token\n").expect("token");
    let r = common::start(
        &Setup::new("hostile-tcp")
            .management(&format!("  interface: 127.0.0.1@{port}\n"))
            .env(
                knot_resolver::api::guard::TOKEN_FILE_VAR,
                token_dir.bed("token").to_str().expect("UTF-8"),
            ),
    )
    .expect("start");
    let get = |host: &str, extra: &str| {
        tcp_status(
            port,
            &format!("GET /v1/config HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{extra}\r\n"),
        )
    };
    let auth = "Authorization: Bearer s3cret-token\r\n";
    assert_eq!(get(&format!("127.0.0.1:{port}"), auth), 200);
    assert_eq!(get(&format!("localhost:{port}"), auth), 200);
    assert_eq!(get(&format!("127.0.0.1:{port}"), ""), 401, "no token");
    assert_eq!(
        get(
            &format!("127.0.0.1:{port}"),
            "Authorization: Bearer wrong\r\n"
        ),
        401
    );
    assert_eq!(
        get(&format!("rebound.example:{port}"), auth),
        421,
        "DNS rebinding"
    );
    assert_eq!(
        get(
            &format!("127.0.0.1:{port}"),
            &format!("{auth}Origin: http://evil.example\r\n")
        ),
        403,
        "cross-site"
    );
    // Our kresctl sends the token from the same variable.
    let url = format!("http://127.0.0.1:{port}");
    let out = std::process::Command::new(common::KRESCTL)
        .args(["-s", &url, "pids", "kresd"])
        .env(knot_resolver::api::guard::TOKEN_FILE_VAR, &token_file)
        .output()
        .expect("kresctl");
    assert!(out.status.success(), "{out:?}");
    let out = std::process::Command::new(common::KRESCTL)
        .args(["-s", &url, "pids", "kresd"])
        .output()
        .expect("kresctl");
    assert!(!out.status.success(), "refused without the token");
    assert!(
        r.launched
            .output
            .count("refused: a valid bearer token is required")
            >= 2
    );
    r.stop();
}

#[test]
fn a_client_that_never_reads_does_not_hold_up_the_stop() {
    // A large configuration, asked for and never read.
    let records: String = (0..20_000)
        .map(|i| format!("    r{i}.test. 300 A 192.0.2.{}\n", i % 250 + 1))
        .collect();
    let mut r = common::start(
        &Setup::new("hostile-nonreader").extra(&format!("local-data:\n  records: |\n{records}")),
    )
    .expect("start");
    let mut clients = Vec::new();
    for _ in 0..4 {
        let mut s = std::os::unix::net::UnixStream::connect(&r.api).expect("connect");
        s.write_all(b"GET /v1/config HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .expect("write");
        clients.push(s);
    }
    // The answers are being written (and not read) when the stop comes.
    let resp = dns::query_udp(r.dns(), "r7.test.", dns::TYPE_A, DNS_TIMEOUT).expect("DNS");
    assert_eq!(resp.a().len(), 1);
    r.launched.signal(Signal::SIGINT).expect("signal");
    let status = r
        .launched
        .wait(STOP_TIMEOUT)
        .expect("stops although nobody reads");
    assert_eq!(status.code(), Some(0), "{}", r.launched.output.text());
    assert!(r.launched.tree().is_empty());
    drop(clients);
}

#[test]
fn a_connection_flood_leaves_dns_and_the_root_alone() {
    let r = common::start(
        &Setup::new("hostile-flood")
            .extra("local-data:\n  records: |\n    alive.test. 300 A 192.0.2.9\n"),
    )
    .expect("start");
    let root = r.launched.pid();
    let root_before = testbed::procs::rss_kib(root).expect("root RSS");
    let workers = r.pids_named("kresd");
    let mut flood = Vec::new();
    for _ in 0..2000 {
        match std::os::unix::net::UnixStream::connect(&r.api) {
            Ok(s) => flood.push(s),
            // The backlog is full: the flood is as large as the kernel lets it be.
            Err(_) => break,
        }
    }
    assert!(flood.len() >= 128, "{} connections", flood.len());
    let resp = dns::query_udp(r.dns(), "alive.test.", dns::TYPE_A, DNS_TIMEOUT).expect("DNS");
    assert_eq!(resp.a().len(), 1);
    let rss = testbed::procs::rss_kib(root).expect("root RSS");
    assert!(
        rss < root_before + ROOT_RSS_GROWTH_KIB,
        "root RSS {rss} KiB, {root_before} KiB before"
    );
    for manager in r.pids_named("kres-manager") {
        let fds = std::fs::read_dir(format!("/proc/{manager}/fd"))
            .map(|d| d.count())
            .unwrap_or(0);
        assert!(fds < 400, "the manager holds {fds} descriptors");
    }
    drop(flood);
    // Once the flood is gone the API answers again.
    let resp = r.http("GET", "/v1/config", b"").expect("API answers");
    assert_eq!(resp.status, 200);
    assert_eq!(r.pids_named("kresd"), workers);
    r.stop();
}

#[test]
fn clients_that_never_finish_their_request_head_leave_room_for_others() {
    let r = common::start(
        &Setup::new("hostile-slow")
            .extra("local-data:\n  records: |\n    alive.test. 300 A 192.0.2.9\n"),
    )
    .expect("start");
    let root_before = testbed::procs::rss_kib(r.launched.pid()).expect("root RSS");
    let workers = r.pids_named("kresd");
    // Fifty clients that send part of a request head and then nothing.
    let mut slow = Vec::new();
    for _ in 0..50 {
        let mut s = std::os::unix::net::UnixStream::connect(&r.api).expect("connect");
        s.write_all(b"GET /v1/config HTTP/1.1\r\nHo")
            .expect("write");
        slow.push(s);
    }
    // A well-behaved client is answered meanwhile, and DNS too.
    let resp = r.http("GET", "/v1/config", b"").expect("API answers");
    assert_eq!(resp.status, 200);
    let answer = dns::query_udp(r.dns(), "alive.test.", dns::TYPE_A, DNS_TIMEOUT).expect("DNS");
    assert_eq!(answer.a().len(), 1);
    assert_eq!(r.pids_named("kresd"), workers);
    let rss = testbed::procs::rss_kib(r.launched.pid()).expect("root RSS");
    assert!(
        rss < root_before + ROOT_RSS_GROWTH_KIB,
        "root RSS {rss} KiB, {root_before} KiB before"
    );
    drop(slow);
    r.stop();
}
