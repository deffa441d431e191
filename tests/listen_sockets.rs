//! Listening sockets owned by the daemon, on real kresd: workers get their slot's sockets with
//! `-S`, and under continuous UDP load no query is lost over rolling restarts, at most one per
//! crash of the only worker, and TCP connections opened while the worker is down are answered.
//! Runtime changes of `network.listen` bind before and close after; `--kresd-binds-sockets`
//! keeps upstream's behaviour.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use common::{Setup, DNS_TIMEOUT};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::json;
use testbed::dns;
use testbed::load::{Load, LoadReport, LoadSpec};

const RECORDS: &str = "local-data:\n  records: |\n    load.test. 300 A 192.0.2.9\n";

/// Longer than the supervisor's stable period of a worker (5 s).
const STABLE: Duration = Duration::from_millis(5500);

/// Queries per second of every load in this file.
const RATE: u32 = 4000;

fn load(server: SocketAddr) -> Load {
    Load::start(LoadSpec::new(server, RATE, "load.test.")).expect("load starts")
}

/// The `-S` arguments of `pid`'s command line.
fn handed_fds(pid: i32) -> Vec<String> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    args.windows(2)
        .filter(|w| w[0] == "-S")
        .map(|w| w[1].clone())
        .collect()
}

/// The socket inode behind descriptor `fd` of `pid`.
fn socket_inode(pid: i32, fd: &str) -> String {
    let fd = fd.split(':').next().unwrap_or(fd);
    std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// What every descriptor of `pid` points to.
fn all_fd_links(pid: i32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .map(|p| p.display().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Worker pid → what its handed descriptors point to.
fn worker_sockets(r: &common::Resolver) -> BTreeMap<i32, Vec<String>> {
    r.pids_named("kresd")
        .into_iter()
        .map(|pid| {
            let inodes = handed_fds(pid)
                .iter()
                .map(|fd| socket_inode(pid, fd))
                .collect();
            (pid, inodes)
        })
        .collect()
}

fn assert_no_loss(what: &str, report: &LoadReport) {
    eprintln!("{what}: {report}");
    assert!(
        report.rate() >= 3000.0,
        "{what}: the load was too slow to prove anything: {:.0}/s",
        report.rate()
    );
    assert_eq!(report.lost, 0, "{what}: {report}");
}

#[test]
fn workers_get_their_slot_sockets_and_rolling_restarts_lose_nothing() {
    let r =
        common::start(&Setup::new("lossless-rolling").workers(2).extra(RECORDS)).expect("start");
    let before = worker_sockets(&r);
    assert_eq!(before.len(), 2, "{before:?}");
    for (pid, inodes) in &before {
        assert_eq!(inodes.len(), 2, "UDP and TCP for kresd {pid}: {inodes:?}");
        assert!(
            inodes.iter().all(|i| i.starts_with("socket:[")),
            "{inodes:?}"
        );
    }
    let mut all: Vec<&String> = before.values().flatten().collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 4, "each slot has its own sockets: {before:?}");
    for (pid, mine) in &before {
        let held = all_fd_links(*pid);
        for (other, theirs) in &before {
            if other != pid {
                assert!(
                    theirs.iter().all(|i| !held.contains(i)),
                    "kresd {pid} holds a socket of kresd {other}"
                );
            }
        }
        assert!(mine.iter().all(|i| held.contains(i)));
    }

    let load = load(r.dns());
    assert!(
        load.wait_answers(1000, Duration::from_secs(10)),
        "load answered"
    );
    for round in 0..3 {
        let resp = r.http("POST", "/renew/force", b"").expect("renew");
        assert_eq!(resp.status, 200, "round {round}: {}", resp.text());
        assert!(
            load.wait_answers(500, Duration::from_secs(10)),
            "round {round}"
        );
    }
    let report = load.stop();
    assert_no_loss("three rolling restarts, 2 workers", &report);

    // New processes, same sockets per slot.
    let after = worker_sockets(&r);
    assert!(
        before.keys().all(|pid| !after.contains_key(pid)),
        "restarted: {before:?} {after:?}"
    );
    let mut old: Vec<Vec<String>> = before.into_values().collect();
    let mut new: Vec<Vec<String>> = after.into_values().collect();
    old.sort();
    new.sort();
    assert_eq!(old, new, "every slot kept its sockets");
    r.stop();
}

#[test]
fn crashes_of_the_only_worker_lose_at_most_one_query_each_and_tcp_waits() {
    let r = common::start(&Setup::new("lossless-crash").workers(1).extra(RECORDS)).expect("start");
    let load = load(r.dns());
    assert!(
        load.wait_answers(1000, Duration::from_secs(10)),
        "load answered"
    );
    const KILLS: u64 = 5;
    for round in 0..KILLS {
        // Each crash hits a worker that has been stable for longer than the supervisor's stable
        // period (5 s), so it is restarted at once rather than after a crash-loop backoff: a
        // backoff of seconds would outlast the socket's receive buffer.
        std::thread::sleep(STABLE);
        let old = r.pids_named("kresd");
        assert_eq!(old.len(), 1, "{old:?}");
        kill(Pid::from_raw(old[0]), Signal::SIGKILL).expect("kill");
        // A connection opened while the worker is down waits in the listening socket's queue.
        let tcp = dns::query_tcp(r.dns(), "load.test.", dns::TYPE_A, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("round {round}: TCP after a crash: {e:#}"));
        assert_eq!(
            tcp.a(),
            vec!["192.0.2.9".parse::<std::net::Ipv4Addr>().unwrap()]
        );
        let new = r.pids_named("kresd");
        assert!(
            new.len() == 1 && new != old,
            "round {round}: {old:?} -> {new:?}"
        );
        assert!(
            load.wait_answers(1000, Duration::from_secs(10)),
            "round {round}"
        );
    }
    let report = load.stop();
    eprintln!("five crashes, 1 worker: {report}");
    assert!(report.rate() >= 3000.0, "{report}");
    assert!(
        report.lost <= KILLS,
        "more than one query lost per crash: {report}"
    );
    r.stop();
}

#[test]
fn listen_changes_bind_first_and_close_after() {
    let r = common::start(&Setup::new("listen-change").workers(2).extra(RECORDS)).expect("start");
    let second = testbed::free_port().expect("port");
    let both = json!([
        {"interface": format!("127.0.0.1@{}", r.port)},
        {"interface": format!("127.0.0.1@{second}")},
    ]);
    let resp = r
        .http(
            "PUT",
            "/v1/config/network/listen",
            both.to_string().as_bytes(),
        )
        .expect("PUT");
    assert_eq!(resp.status, 200, "{}", resp.text());
    let second_addr = SocketAddr::from(([127, 0, 0, 1], second));
    for server in [r.dns(), second_addr] {
        let a = dns::query_udp(server, "load.test.", dns::TYPE_A, DNS_TIMEOUT).expect("answer");
        assert_eq!(a.a().len(), 1, "{server}");
    }
    for pid in r.pids_named("kresd") {
        assert_eq!(handed_fds(pid).len(), 4, "two addresses, UDP and TCP");
    }

    // A port someone else holds: 400, nothing changes.
    let holder = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let taken = holder.local_addr().expect("addr").port();
    let pids = r.pids_named("kresd");
    let bad = json!([
        {"interface": format!("127.0.0.1@{}", r.port)},
        {"interface": format!("127.0.0.1@{taken}")},
    ]);
    let resp = r
        .http(
            "PUT",
            "/v1/config/network/listen",
            bad.to_string().as_bytes(),
        )
        .expect("PUT");
    assert_eq!(resp.status, 400, "{}", resp.text());
    assert!(
        resp.text()
            .contains(&format!("cannot bind 127.0.0.1:{taken}")),
        "{}",
        resp.text()
    );
    assert_eq!(r.pids_named("kresd"), pids, "workers untouched");

    // Dropping the first port closes it once the workers that had it are gone.
    let only_second = json!([{"interface": format!("127.0.0.1@{second}")}]);
    let resp = r
        .http(
            "PUT",
            "/v1/config/network/listen",
            only_second.to_string().as_bytes(),
        )
        .expect("PUT");
    assert_eq!(resp.status, 200, "{}", resp.text());
    dns::query_udp(second_addr, "load.test.", dns::TYPE_A, DNS_TIMEOUT).expect("second answers");
    assert!(
        std::net::TcpStream::connect(r.dns()).is_err(),
        "the removed port is closed"
    );
    std::net::UdpSocket::bind(r.dns()).expect("the removed UDP port is free again");
    for pid in r.pids_named("kresd") {
        assert_eq!(handed_fds(pid).len(), 2, "only the second address");
    }
    r.stop();
}

#[test]
fn kresd_binds_sockets_keeps_upstreams_behaviour() {
    let r = common::start(
        &Setup::new("kresd-binds")
            .workers(1)
            .extra(RECORDS)
            .env("KRES_KRESD_BINDS_SOCKETS", "1"),
    )
    .expect("start");
    for pid in r.pids_named("kresd") {
        assert!(handed_fds(pid).is_empty(), "no -S when kresd binds");
    }
    dns::query_udp(r.dns(), "load.test.", dns::TYPE_A, DNS_TIMEOUT).expect("kresd listens");
    // The canary, not the daemon, refuses an address nobody can bind.
    let listen =
        json!([{"interface": format!("127.0.0.1@{}", r.port)}, {"interface": "192.0.2.1@53"}]);
    let resp = r
        .http(
            "PUT",
            "/v1/config/network/listen",
            listen.to_string().as_bytes(),
        )
        .expect("PUT");
    assert_eq!(resp.status, 400, "{}", resp.text());
    assert!(resp.text().contains("canary"), "{}", resp.text());
    r.stop();
}

#[test]
fn interface_names_expand_to_their_addresses() {
    let r = common::start(&Setup::new("listen-ifname").workers(1).extra(RECORDS)).expect("start");
    let listen = json!([{"interface": format!("lo@{}", r.port)}]);
    let resp = r
        .http(
            "PUT",
            "/v1/config/network/listen",
            listen.to_string().as_bytes(),
        )
        .expect("PUT");
    assert_eq!(resp.status, 200, "{}", resp.text());
    let v6 = std::net::UdpSocket::bind("[::1]:0").is_ok();
    let addresses = if v6 { 2 } else { 1 };
    for pid in r.pids_named("kresd") {
        assert_eq!(
            handed_fds(pid).len(),
            2 * addresses,
            "UDP and TCP per address of lo"
        );
    }
    dns::query_udp(r.dns(), "load.test.", dns::TYPE_A, DNS_TIMEOUT).expect("127.0.0.1 answers");
    if v6 {
        let server = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, r.port));
        dns::query_udp(server, "load.test.", dns::TYPE_A, DNS_TIMEOUT).expect("::1 answers");
    }
    r.stop();
}

#[test]
fn dot_through_a_handed_socket() {
    let r = common::start(&Setup::new("listen-dot").workers(1).extra(RECORDS)).expect("start");
    let (cert, key) = (r.dir.host("cert.pem"), r.dir.host("key.pem"));
    testbed::self_signed_cert("load.test", &cert, &key).expect("certificate");
    let dot = testbed::free_port().expect("port");
    let network = json!({
        "listen": [
            {"interface": format!("127.0.0.1@{}", r.port)},
            {"interface": format!("127.0.0.1@{dot}"), "kind": "dot"},
        ],
        "tls": {
            "cert-file": r.dir.bed("cert.pem").display().to_string(),
            "key-file": r.dir.bed("key.pem").display().to_string(),
        },
    });
    let resp = r
        .http("PUT", "/v1/config/network", network.to_string().as_bytes())
        .expect("PUT");
    assert_eq!(resp.status, 200, "{}", resp.text());
    let pid = r.pids_named("kresd")[0];
    let fds = handed_fds(pid);
    assert_eq!(
        fds.iter().filter(|f| f.ends_with(":tls")).count(),
        1,
        "{fds:?}"
    );
    let out = r
        .bed
        .run_installed(
            "kdig",
            &[
                "+tls",
                "+short",
                "+timeout=5",
                "-p",
                &dot.to_string(),
                "@127.0.0.1",
                "load.test.",
                "A",
            ],
        )
        .expect("kdig runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.trim(),
        "192.0.2.9",
        "kdig: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    r.stop();
}
