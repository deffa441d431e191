//! Port 53 without privileges in kresd: the daemon (root) binds the listening sockets and runs
//! every kresd as the `knot-resolver` user of the test bed, which holds no capability at all,
//! so it could never bind port 53 itself.

mod common;

use common::{Setup, DNS_TIMEOUT, STOP_TIMEOUT};
use nix::sys::signal::Signal;
use testbed::{dns, Bed};

/// A `Key:\tvalue` line of /proc/PID/status.
fn status_field(pid: i32, key: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|v| v.trim().to_owned())
        .unwrap_or_default()
}

#[test]
fn port_53_is_served_by_kresd_running_as_an_unprivileged_user() {
    let bed = Bed::get().expect("bed");
    let (uid, gid) = common::bed_user(bed, "knot-resolver");
    let dir = bed.test_dir("port53").expect("dir");
    for d in ["run", "cache"] {
        std::fs::create_dir_all(dir.host(d)).expect("dir");
        std::os::unix::fs::chown(dir.host(d), Some(uid), Some(gid)).expect("chown");
    }
    let port = testbed::free_port().expect("port");
    let setup = Setup::new("port53")
        .workers(2)
        .network("    - interface: 127.0.0.1@53\n")
        .extra("local-data:\n  records: |\n    p53.test. 300 A 192.0.2.53\n");
    let mut launched = common::start_with_worker_user(bed, &dir, port, &setup);

    let answer = dns::query_udp(
        "127.0.0.1:53".parse().expect("addr"),
        "p53.test.",
        dns::TYPE_A,
        DNS_TIMEOUT,
    )
    .expect("answer on port 53");
    assert_eq!(
        answer.a(),
        vec!["192.0.2.53".parse::<std::net::Ipv4Addr>().expect("ip")]
    );
    let tcp = dns::query_tcp(
        "127.0.0.1:53".parse().expect("addr"),
        "p53.test.",
        dns::TYPE_A,
        DNS_TIMEOUT,
    )
    .expect("TCP answer on port 53");
    assert_eq!(tcp.a().len(), 1);

    let workers: Vec<i32> = launched
        .descendants()
        .iter()
        .filter(|p| p.comm == "kresd")
        .map(|p| p.pid)
        .collect();
    assert_eq!(workers.len(), 2);
    for pid in workers {
        let uids = status_field(pid, "Uid:");
        assert!(
            uids.split_whitespace().all(|u| u == uid.to_string()),
            "kresd {pid} runs as {uids}"
        );
        for caps in ["CapEff:", "CapPrm:", "CapAmb:"] {
            assert_eq!(
                status_field(pid, caps),
                "0000000000000000",
                "kresd {pid} {caps}"
            );
        }
    }

    // The manager process, which parses every request and file, is not root: the workers'
    // user, no capability but binding ports below 1024 (it bound port 53 for them), no way to
    // gain more, and undumpable (no worker of its user can attach to it).
    let manager = launched
        .descendants()
        .into_iter()
        .find(|p| p.comm == "kres-manager")
        .expect("the manager process");
    let uids = status_field(manager.pid, "Uid:");
    assert!(
        uids.split_whitespace().all(|u| u == uid.to_string()),
        "the manager runs as {uids}"
    );
    let gids = status_field(manager.pid, "Gid:");
    assert!(
        gids.split_whitespace().all(|g| g == gid.to_string()),
        "the manager's groups: {gids}"
    );
    assert_eq!(status_field(manager.pid, "Groups:"), "");
    // Bit 10: CAP_NET_BIND_SERVICE.
    for caps in ["CapEff:", "CapPrm:", "CapAmb:"] {
        assert_eq!(
            status_field(manager.pid, caps),
            "0000000000000400",
            "the manager's {caps}"
        );
    }
    assert_eq!(status_field(manager.pid, "NoNewPrivs:"), "1");
    let dumpable = std::fs::metadata(format!("/proc/{}/mem", manager.pid)).expect("mem");
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&dumpable),
        0,
        "undumpable: its /proc files are root's"
    );
    eprintln!(
        "manager {}: Uid {uids}, CapEff {}, NoNewPrivs {}",
        manager.pid,
        status_field(manager.pid, "CapEff:"),
        status_field(manager.pid, "NoNewPrivs:")
    );
    // As that user it still writes the workers' files and rolls them on port 53.
    let api = dir.host("run/kres-api.sock");
    let changed = testbed::http::request(
        &api,
        "PUT",
        "/v1/config/local-data/records",
        &[("Content-Type", "application/json")],
        br#""p53.test. 300 A 192.0.2.54\n""#,
    )
    .expect("PUT");
    assert_eq!(
        changed.status,
        200,
        "{}",
        String::from_utf8_lossy(&changed.body)
    );
    let answer = dns::query_udp(
        "127.0.0.1:53".parse().expect("addr"),
        "p53.test.",
        dns::TYPE_A,
        DNS_TIMEOUT,
    )
    .expect("answer after the change");
    assert_eq!(
        answer.a(),
        vec!["192.0.2.54".parse::<std::net::Ipv4Addr>().expect("ip")]
    );

    launched.signal(Signal::SIGINT).expect("signal");
    let status = launched.wait(STOP_TIMEOUT).expect("exit");
    assert_eq!(status.code(), Some(0), "{}", launched.output.text());
    assert!(launched.tree().is_empty());
}
