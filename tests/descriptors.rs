//! Open descriptors on real kresd: the root holds two of every listening socket of every
//! worker, so 16 workers on 16 addresses need more than the soft limit of 1,024 that systemd
//! and container runtimes start services with. The root raises its soft limit to the hard one,
//! and a configuration that cannot fit even then is refused with the numbers, at start and
//! through the API, while the running one keeps serving.

mod common;

use common::{Setup, DNS_TIMEOUT, START_TIMEOUT};
use serde_json::json;
use testbed::dns;

const RECORDS: &str = "local-data:\n  records: |\n    fd.test. 300 A 192.0.2.77\n";

/// 16 listening addresses: 127.0.0.1 (the setup's own, on its port) and 127.0.0.2 to
/// 127.0.0.16 (on a port of their own).
const ADDRESSES: u8 = 16;

/// The `network.listen` items for 127.0.0.2 and up, on `port`.
fn more_addresses(port: u16) -> String {
    (2..=ADDRESSES)
        .map(|n| format!("    - interface: 127.0.0.{n}@{port}\n"))
        .collect()
}

/// A setup on 16 addresses, and the port of all but the first.
fn sixteen_addresses(name: &'static str, workers: u32) -> (Setup, u16) {
    let port = testbed::free_port().expect("port");
    let setup = Setup::new(name)
        .workers(workers)
        .extra(RECORDS)
        .network(&more_addresses(port));
    (setup, port)
}

fn answers_on(addr: std::net::SocketAddr) -> bool {
    dns::query_udp(addr, "fd.test.", dns::TYPE_A, DNS_TIMEOUT)
        .map(|a| a.a().iter().any(|ip| ip.to_string() == "192.0.2.77"))
        .unwrap_or(false)
}

#[test]
fn sixteen_workers_on_sixteen_addresses_start_under_a_soft_limit_of_1024() {
    let (setup, port) = sixteen_addresses("fd-sixteen", 16);
    let r = common::start(&setup.open_files(1024, 8192)).expect("starts");
    let root = r.launched.pid();
    assert_eq!(
        testbed::procs::open_files_limit(root).expect("limits"),
        (8192, 8192),
        "the root raised its soft limit"
    );
    let managers = r.pids_named("kres-manager");
    assert_eq!(managers.len(), 1, "{managers:?}");
    assert_eq!(
        testbed::procs::open_files_limit(managers[0]).expect("limits"),
        (8192, 8192),
        "the manager has it too: the API's bound of connections follows it"
    );
    let workers = testbed::wait_for("16 workers", START_TIMEOUT, || {
        let pids = r.pids_named("kresd");
        Ok((pids.len() == 16).then_some(pids))
    })
    .expect("workers");
    for n in 1..=ADDRESSES {
        let addr = std::net::SocketAddr::from(([127, 0, 0, n], if n == 1 { r.port } else { port }));
        assert!(answers_on(addr), "no answer on {addr}");
    }
    let root_fds = testbed::procs::open_descriptors(root);
    let needed = kres_daemon::manager::listen::descriptors_needed(16, 2 * ADDRESSES as usize);
    eprintln!(
        "16 workers x {} sockets: the root holds {root_fds} descriptors (counted: {needed}), \
         a worker {}",
        2 * ADDRESSES,
        testbed::procs::open_descriptors(workers[0])
    );
    assert!(
        root_fds > 1024,
        "the configuration needs more than the soft limit the root started with"
    );
    assert!(
        root_fds as u64 <= needed,
        "the count at validation ({needed}) covers what the root holds ({root_fds})"
    );
    r.stop();
}

#[test]
fn a_configuration_the_root_cannot_hold_is_refused_with_the_numbers() {
    // At start: nothing runs, the error says what is needed and what the limit is.
    let (setup, _) = sixteen_addresses("fd-refused-start", 16);
    let mut r = common::launch(&setup.open_files(1024, 1024)).expect("launch");
    let status = r.launched.wait(START_TIMEOUT).expect("exits");
    assert_eq!(status.code(), Some(1), "{}", r.launched.output.text());
    let text = r.launched.output.text();
    for said in [
        "16 workers",
        "32 listening sockets",
        "limit is 1024",
        "/workers",
    ] {
        assert!(text.contains(said), "{said:?} missing from:\n{text}");
    }
    assert!(
        r.launched.tree().is_empty(),
        "left: {:?}",
        r.launched.tree()
    );

    // Through the API: refused with 400 and the numbers; the running workers keep serving.
    let (setup, port) = sixteen_addresses("fd-refused-change", 1);
    let r = common::start(&setup.open_files(1024, 1024)).expect("starts");
    let before = r.pids_named("kresd");
    let refused = r.put_json("/workers", json!(16));
    let body = String::from_utf8_lossy(&refused.body).into_owned();
    assert_eq!(refused.status, 400, "{body}");
    assert!(body.contains("limit is 1024"), "{body}");
    assert!(body.contains("16 workers"), "{body}");
    assert_eq!(
        r.pids_named("kresd"),
        before,
        "the running worker is untouched"
    );
    for n in 1..=ADDRESSES {
        let addr = std::net::SocketAddr::from(([127, 0, 0, n], if n == 1 { r.port } else { port }));
        assert!(answers_on(addr), "no answer on {addr} after the refusal");
    }
    let workers = r.http("GET", "/v1/config/workers", b"").expect("GET");
    assert_eq!(String::from_utf8_lossy(&workers.body).trim(), "1");
    r.stop();
}
