//! A fleet on real kresd and a real three-member etcd (the test bed's, on loopback): five
//! resolvers join one fleet; a document written to etcd, then records set with `kresctl
//! config set` on one node, are answered by all five (the time from the command to the last
//! node answering, over 20 changes, is printed), and a path a node's own file decides is
//! refused, and `kresctl fleet rollback` brings back the document before; a document that
//! fails validation is applied by none and reported by every one, DNS unchanged; with two of
//! three members killed every node answers throughout, a change is refused naming the store,
//! and a node started again meanwhile answers from the document it kept; quorum back, the
//! fleet converges on a new document. Four nodes over TLS with client certificates stage
//! changes: a canary whose kresd fails, or whose SERVFAIL share rises over its soak, halts the
//! rollout at the first wave (the others hold the document back, and a conditional change
//! through one of them is refused as stale); a sound one goes node by node in order; a hung
//! store refuses changes while DNS goes on.

mod common;

use std::time::{Duration, Instant};

use common::{Resolver, Setup};
use serde_json::Value;
use testbed::etcd::{EtcdCluster, Security};

/// How long a fleet may take to converge before the test fails (generous; never a figure).
const CONVERGE: Duration = Duration::from_secs(30);

/// The fleet's key prefix.
const PREFIX: &str = "/knot-resolver/test";

/// A node of the fleet at `cluster`, named `node`, its cache (and kept document) at
/// `storage` when given.
fn node_setup(name: &'static str, node: &str, cluster: &EtcdCluster) -> Setup {
    let endpoints: Vec<String> = cluster.endpoints();
    Setup::new(name).logging("  level: info\n").extra(&format!(
        "fleet:\n  node: {node}\n  etcd:\n    endpoints: [{}]\n    prefix: {PREFIX}\n    timeout: 1s\n",
        endpoints.join(", ")
    ))
}

/// Write the fleet's document: one record of `fleet.test.`.
fn write_document(cluster: &EtcdCluster, member: usize, document: &str) {
    cluster
        .put_raw(
            member,
            format!("{PREFIX}/config").as_bytes(),
            document.as_bytes(),
        )
        .expect("the document written");
}

fn record(address: &str) -> String {
    format!(r#"{{"local-data": {{"records": "fleet.test. 60 A {address}\n"}}}}"#)
}

/// Read the nodes' notifications, as systemd does: a node whose service manager stopped
/// reading waits a second for each of them at every change.
fn drain(nodes: &mut [Resolver]) {
    for node in nodes {
        node.notify.drain().expect("notifications");
    }
}

/// Wait until every node answers `fleet.test.` with `address`; how long it took.
fn converged(nodes: &mut [Resolver], address: &str) -> Duration {
    let all: Vec<usize> = (0..nodes.len()).collect();
    converged_on(nodes, &all, address)
}

/// Wait until the nodes at `indices` answer `fleet.test.` with `address`; how long it took.
fn converged_on(nodes: &mut [Resolver], indices: &[usize], address: &str) -> Duration {
    let began = Instant::now();
    for &i in indices {
        testbed::wait_for(&format!("node {i} to answer {address}"), CONVERGE, || {
            drain(nodes);
            Ok((nodes[i].a_records("fleet.test.") == [address]).then_some(()))
        })
        .unwrap_or_else(|e| panic!("{e}\n{}", nodes[i].launched.output.text()));
    }
    began.elapsed()
}

/// The value of the series `name` (no labels) in `node`'s Prometheus text.
fn gauge(node: &Resolver, name: &str) -> f64 {
    let text = node
        .http("GET", "/metrics/prometheus", b"")
        .expect("scrape")
        .text();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

/// `kresctl fleet status --json` of `node`.
fn status(node: &Resolver) -> Value {
    let out = node
        .kresctl(&["fleet", "status", "--json"])
        .expect("kresctl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[test]
fn five_nodes_follow_one_document_refuse_a_bad_one_and_outlive_the_store() {
    let mut cluster = EtcdCluster::start(Security::Plain).expect("etcd");
    let names = ["fleet-1", "fleet-2", "fleet-3", "fleet-4", "fleet-5"];
    let bed = testbed::Bed::get().expect("bed");
    let kept = bed.test_dir("fleet-kept").expect("dir");
    std::fs::create_dir_all(kept.host("cache")).expect("cache dir");
    let mut nodes: Vec<Resolver> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let setup = node_setup(name, &format!("n{}", i + 1), &cluster);
            let setup = if i == 0 {
                setup.storage(&kept.bed("cache"))
            } else {
                setup
            };
            common::start(&setup).expect("a node starts")
        })
        .collect();

    // The first document straight into etcd, then 20 changes through node 1's kresctl: the
    // time from the command to the last node answering.
    write_document(&cluster, 0, &record("192.0.2.250"));
    converged(&mut nodes, "192.0.2.250");
    let mut times = Vec::new();
    for n in 1..=20 {
        let address = format!("192.0.2.{n}");
        let records = serde_json::json!(format!("fleet.test. 60 A {address}\n")).to_string();
        let written = Instant::now();
        let out = nodes[0]
            .kresctl(&["config", "set", "-p", "/local-data/records", &records])
            .expect("kresctl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        converged(&mut nodes, &address);
        times.push(written.elapsed());
    }
    // A path a node's own file decides is refused, fleet-wide writes are not made of it.
    let out = nodes[0]
        .kresctl(&["config", "set", "-p", "/workers", "2"])
        .expect("kresctl");
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        said.contains("/workers is this node's own in the fleet"),
        "{said}"
    );
    // A rollback from another node: the document before the last one, on every node.
    let out = nodes[4].kresctl(&["fleet", "rollback"]).expect("kresctl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    converged(&mut nodes, "192.0.2.19");
    times.sort();
    eprintln!(
        "five nodes answered a record set with kresctl on one in {:.0} ms (p50), {:.0} ms \
         (the slowest of 20)",
        times[times.len() / 2].as_secs_f64() * 1e3,
        times[times.len() - 1].as_secs_f64() * 1e3
    );
    let seen = status(&nodes[0]);
    let newest = seen["newest"].as_i64().expect("newest");
    let nodes_seen = seen["nodes"].as_array().expect("nodes");
    assert_eq!(nodes_seen.len(), 5, "{seen}");
    assert!(
        nodes_seen
            .iter()
            .all(|n| n["revision"].as_i64() == Some(newest)),
        "{seen}"
    );
    for node in &nodes {
        assert_eq!(
            gauge(node, "knot_resolver_fleet_document_revision"),
            newest as f64
        );
        assert_eq!(
            gauge(node, "knot_resolver_fleet_newest_document_revision"),
            newest as f64
        );
        assert_eq!(gauge(node, "knot_resolver_fleet_store_up"), 1.0);
    }

    // A document no node can run: refused by all, reported with the reason, DNS unchanged.
    // (A value the node's own file sets, such as `cache/size-max`, would be overridden.)
    write_document(&cluster, 0, r#"{"options": {"minimize": "sometimes"}}"#);
    let refused = testbed::wait_for("every node to refuse it", CONVERGE, || {
        drain(&mut nodes);
        let seen = status(&nodes[1]);
        let all = seen["nodes"].as_array().is_some_and(|n| {
            n.len() == 5
                && n.iter().all(|n| {
                    n["refused"]["reason"]
                        .as_str()
                        .is_some_and(|r| r.contains("/options/minimize"))
                })
        });
        Ok(all.then_some(seen))
    })
    .unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            status(&nodes[1]),
            nodes[1].launched.output.text()
        )
    });
    assert!(refused["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .all(|n| n["revision"].as_i64() == Some(newest)));
    let refused_revision = refused["newest"].as_i64().expect("newest");
    assert_eq!(
        gauge(&nodes[3], "knot_resolver_fleet_refused_document_revision"),
        refused_revision as f64
    );
    assert_eq!(
        gauge(&nodes[3], "knot_resolver_fleet_document_revision"),
        newest as f64
    );
    let text = nodes[2].kresctl(&["fleet", "status"]).expect("kresctl");
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains("5 of 5 nodes do not run the newest document"),
        "{text}"
    );
    for node in &nodes {
        assert_eq!(node.a_records("fleet.test."), ["192.0.2.19"]);
    }

    // Quorum lost: DNS goes on, a node started again answers from what it kept.
    let leader = cluster.leader().expect("leader");
    let others: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    cluster.kill(others[0]).expect("kill");
    cluster.kill(leader).expect("kill");
    for node in &nodes {
        assert_eq!(node.a_records("fleet.test."), ["192.0.2.19"]);
    }
    // A change meanwhile is refused with the reason, and changes nothing.
    let out = nodes[1]
        .kresctl(&["config", "set", "-p", "/local-data/ttl", "\"2h\""])
        .expect("kresctl");
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(said.contains("the fleet's store"), "{said}");
    nodes.remove(0).stop();
    let again = node_setup("fleet-1-again", "n1", &cluster).storage(&kept.bed("cache"));
    nodes.insert(0, common::start(&again).expect("starts without the store"));
    assert_eq!(nodes[0].a_records("fleet.test."), ["192.0.2.19"]);

    // Quorum back: a new document reaches every node.
    cluster.restart(leader).expect("restart");
    cluster.restart(others[0]).expect("restart");
    cluster
        .wait_healthy(testbed::etcd::HEALTHY_WITHIN)
        .expect("healthy");
    write_document(&cluster, leader, &record("192.0.2.99"));
    converged(&mut nodes, "192.0.2.99");
    for node in nodes {
        node.stop();
    }
}

/// `node`'s record in `kresctl fleet status --json`.
fn node_record<'a>(seen: &'a Value, node: &str) -> &'a Value {
    seen["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["node"] == node))
        .unwrap_or_else(|| panic!("no node {node} in {seen}"))
}

/// Run `kresctl` on `node`; its standard output, or a panic with its standard error.
fn kresctl_ok(node: &Resolver, args: &[&str]) -> String {
    let out = node.kresctl(args).expect("kresctl");
    assert!(
        out.status.success(),
        "kresctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_staged_rollout_halts_at_a_refusing_canary_and_else_goes_wave_by_wave() {
    // Over TLS with client certificates, as a fleet across machines would run.
    let mut cluster = EtcdCluster::start(Security::Tls).expect("etcd");
    let tls = cluster.client_tls().expect("TLS");
    let bed = testbed::Bed::get().expect("bed");
    let certs = bed.test_dir("fleet-certs").expect("dir");
    for (from, to) in [
        (&tls.ca, "ca.pem"),
        (&tls.cert, "node.pem"),
        (&tls.key, "node.key"),
    ] {
        std::fs::copy(from, certs.host(to)).expect("copied into the bed");
    }
    let tls_options = format!(
        "    ca-file: {}\n    cert-file: {}\n    key-file: {}\n",
        certs.bed("ca.pem").display(),
        certs.bed("node.pem").display(),
        certs.bed("node.key").display()
    );
    let names = ["staged-1", "staged-2", "staged-3", "staged-4"];
    let mut nodes: Vec<Resolver> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let node = format!("n{}", i + 1);
            let mut setup = node_setup(name, &node, &cluster).extra(&tls_options);
            if i == 3 {
                // The node changes are staged through: a short soak.
                setup = setup.extra("  rollout:\n    soak: 1s\n    wave: '1'\n");
            }
            common::start(&setup.extra(&format!("hostname: {node}\n"))).expect("a node starts")
        })
        .collect();
    cluster
        .etcdctl(&["put", &format!("{PREFIX}/config"), &record("192.0.2.1")])
        .expect("the document written");
    converged(&mut nodes, "192.0.2.1");
    // Where n4's configuration comes from.
    let out = nodes[3]
        .kresctl(&["config", "get", "--explain", "-p", "/local-data"])
        .expect("kresctl");
    let explained = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{explained}");
    assert!(
        explained.contains(
            "# node n4 of fleet /knot-resolver/test: it runs the fleet's document (revision"
        ),
        "{explained}"
    );
    assert!(
        explained.contains("\n#   /hostname\n") && explained.contains("\n#   /fleet\n"),
        "{explained}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("fleet.test. 60 A 192.0.2.1"));

    // A change whose canary fails on n3 only (the inject: its Lua fails on that host).
    let failing = serde_json::json!([
        {"op": "add", "path": "/lua", "value": {
            "script": "if hostname() == 'n3' then error('injected canary failure') end"}},
        {"op": "replace", "path": "/local-data/records", "value": "fleet.test. 60 A 192.0.2.2\n"},
    ])
    .to_string();
    let said = kresctl_ok(
        &nodes[3],
        &[
            "config",
            "patch",
            "--canary-node",
            "n3",
            "--wave",
            "1",
            &failing,
        ],
    );
    assert!(said.contains("staged: canary 1: n3; wave 2: n1"), "{said}");
    let halted = testbed::wait_for("the rollout to halt", CONVERGE, || {
        drain(&mut nodes);
        let seen = status(&nodes[0]);
        Ok((seen["rollout"]["state"] == "halted").then_some(seen))
    })
    .expect("halted");
    let why = halted["rollout"]["halted"].as_str().unwrap_or_default();
    assert!(why.contains("node n3 refused revision"), "{halted}");
    assert!(why.contains("injected canary failure"), "{halted}");
    assert_eq!(halted["rollout"]["admitted"], 1, "no wave after the canary");
    let staged = halted["newest"].as_i64().expect("newest");
    testbed::wait_for("the others to say they are held", CONVERGE, || {
        let seen = status(&nodes[1]);
        Ok(["n1", "n2", "n4"]
            .iter()
            .all(|n| node_record(&seen, n)["held"] == staged)
            .then_some(()))
    })
    .expect("held");
    for node in &nodes {
        assert_eq!(node.a_records("fleet.test."), ["192.0.2.1"]);
    }
    // n2 runs a document older than the fleet's newest: a change conditional on what it runs
    // names a stale document and is refused; its tag is the one it runs.
    let read = nodes[1].http("GET", "/v1/config", b"").expect("GET");
    let tag = read.header("etag").expect("ETag").to_owned();
    let conditional = testbed::http::request(
        &nodes[1].api,
        "PUT",
        "/v1/config/local-data/ttl",
        &[("Content-Type", "application/json"), ("If-Match", &tag)],
        b"\"2h\"",
    )
    .expect("PUT");
    assert_eq!(conditional.status, 412, "{}", conditional.text());
    assert_eq!(conditional.header("etag"), Some(tag.as_str()));
    let text = kresctl_ok(&nodes[2], &["fleet", "status"]);
    assert!(
        text.contains("wave 1 of 4 admitted (canary n3), HALTED: node n3 refused"),
        "{text}"
    );
    assert!(
        text.contains(&format!("{staged}: held until its wave")),
        "{text}"
    );
    // The status page of a held node shows the same, with nothing failing in the page.
    let ui = common::serve_ui(&nodes[1]);
    let browser =
        testbed::webdriver::Browser::start(&nodes[1].dir.host("browser")).expect("browser");
    browser.open(&ui.url).expect("page");
    let shown = browser
        .wait_until(
            "the fleet on the status page",
            CONVERGE,
            "const r = document.getElementById('fleet-rollout'); \
             const held = document.querySelector('#fleet tr[data-node=\"n1\"]'); \
             const refused = document.querySelector('#fleet tr[data-node=\"n3\"]'); \
             return r && !r.hidden && held && refused \
               ? [r.textContent, held.textContent, refused.textContent] : null;",
        )
        .expect("shown");
    assert!(
        shown[0]
            .as_str()
            .is_some_and(|t| t.contains("halted: node n3 refused")),
        "{shown}"
    );
    assert!(
        shown[1]
            .as_str()
            .is_some_and(|t| t.contains("held until its wave")),
        "{shown}"
    );
    assert!(
        shown[2]
            .as_str()
            .is_some_and(|t| t.contains("injected canary failure")),
        "{shown}"
    );
    assert_eq!(
        browser.console_errors().expect("console"),
        Vec::<String>::new()
    );
    drop(browser);
    drop(ui);

    // Rolled back from any node: the rollout ends, every node on the document before.
    kresctl_ok(&nodes[1], &["fleet", "rollback"]);
    let back = testbed::wait_for("every node on the rollback", CONVERGE, || {
        drain(&mut nodes);
        let seen = status(&nodes[0]);
        let newest = seen["newest"].as_i64();
        let all = seen["nodes"].as_array().is_some_and(|n| {
            n.len() == 4
                && n.iter()
                    .all(|n| n["revision"].as_i64() == newest && n["held"].is_null())
        });
        Ok(all.then_some(seen))
    })
    .expect("rolled back");
    assert!(back["rollout"].is_null(), "{back}");
    // On a node that runs the newest document, the same conditional change goes through.
    let tag = nodes[1]
        .http("GET", "/v1/config", b"")
        .expect("GET")
        .header("etag")
        .expect("ETag")
        .to_owned();
    let conditional = testbed::http::request(
        &nodes[1].api,
        "PUT",
        "/v1/config/local-data/ttl",
        &[("Content-Type", "application/json"), ("If-Match", &tag)],
        b"\"2h\"",
    )
    .expect("PUT");
    assert_eq!(conditional.status, 200, "{}", conditional.text());

    // Not staged (through a node without a policy): n3 refuses it, reported with the reason,
    // while the others run it.
    kresctl_ok(&nodes[0], &["config", "patch", &failing]);
    converged_on(&mut nodes, &[0, 1, 3], "192.0.2.2");
    let refused = testbed::wait_for("n3 to report its refusal", CONVERGE, || {
        let seen = status(&nodes[0]);
        let reason = node_record(&seen, "n3")["refused"]["reason"]
            .as_str()
            .map(str::to_owned);
        Ok(reason)
    })
    .expect("refused");
    assert!(refused.contains("injected canary failure"), "{refused}");
    assert_eq!(nodes[2].a_records("fleet.test."), ["192.0.2.1"]);

    // Staged and sound: the canary, then one node a wave, each after its soak.
    let sound = serde_json::json!([
        {"op": "replace", "path": "/lua", "value": {}},
        {"op": "replace", "path": "/local-data/records", "value": "fleet.test. 60 A 192.0.2.3\n"},
    ])
    .to_string();
    kresctl_ok(
        &nodes[3],
        &[
            "config",
            "patch",
            "--canary-node",
            "n2",
            "--wave",
            "1",
            &sound,
        ],
    );
    let done = testbed::wait_for("the rollout to reach every node", CONVERGE * 2, || {
        drain(&mut nodes);
        let seen = status(&nodes[0]);
        Ok((seen["rollout"]["state"] == "done").then_some(seen))
    })
    .unwrap_or_else(|e| panic!("{e}: {}", status(&nodes[0])));
    converged(&mut nodes, "192.0.2.3");
    let order: Vec<f64> = ["n2", "n1", "n3", "n4"]
        .iter()
        .map(|n| {
            node_record(&done, n)["changed_at"]
                .as_f64()
                .expect("changed_at")
        })
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "waves in order: {order:?} {done}"
    );
    for n in ["n1", "n2", "n3", "n4"] {
        assert_eq!(node_record(&done, n)["soak"]["passed"], true, "{done}");
    }

    // Staged, and the canary answers SERVFAIL for a name it answered before: its soak fails
    // (the share counted from its workers' own statistics) and the rollout halts there.
    let servfail = serde_json::json!([{"op": "replace", "path": "/lua", "value": {"script":
        "policy.add(policy.suffix(function(_, req) req:ensure_answer():rcode(kres.rcode.SERVFAIL) \
         return kres.DONE end, {todname('fail.test.')}))"}}])
    .to_string();
    // The canary is asked the name all along, from before the change to the halt, so its
    // soak counts answers whenever it runs.
    let asking = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let asker = {
        let (asking, canary) = (asking.clone(), nodes[0].dns());
        std::thread::spawn(move || {
            while asking.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = testbed::dns::query_udp(
                    canary,
                    "x.fail.test.",
                    testbed::dns::TYPE_A,
                    Duration::from_millis(200),
                );
            }
        })
    };
    kresctl_ok(
        &nodes[3],
        &[
            "config",
            "patch",
            "--canary-node",
            "n1",
            "--wave",
            "1",
            &servfail,
        ],
    );
    let halted = testbed::wait_for("the SERVFAIL rise to halt it", CONVERGE, || {
        drain(&mut nodes);
        let seen = status(&nodes[1]);
        Ok((seen["rollout"]["state"] != "rolling").then_some(seen))
    });
    asking.store(false, std::sync::atomic::Ordering::Relaxed);
    asker.join().expect("the asker");
    let halted = halted.expect("halted");
    let why = halted["rollout"]["halted"].as_str().unwrap_or_default();
    assert!(
        why.contains("node n1's SERVFAIL share rose from"),
        "{halted}"
    );
    let soak = &node_record(&halted, "n1")["soak"];
    assert!(soak["answers_after"].as_u64() > Some(0), "{halted}");
    assert!(soak["servfail_after"].as_f64() > Some(0.5), "{halted}");
    let reply = testbed::dns::query_udp(
        nodes[1].dns(),
        "x.fail.test.",
        testbed::dns::TYPE_A,
        Duration::from_secs(5),
    )
    .expect("answer");
    assert_ne!(reply.rcode, 2, "n2 is held back: no SERVFAIL from it");
    kresctl_ok(&nodes[0], &["fleet", "rollback"]);

    // A store that hangs (every member stopped, its sockets still open): DNS goes on, a
    // change is refused naming the store once the client's time is up; back, it goes through.
    for i in 0..3 {
        cluster.pause(i, true).expect("paused");
    }
    for node in &nodes {
        assert_eq!(node.a_records("fleet.test."), ["192.0.2.3"]);
    }
    let records = serde_json::json!("fleet.test. 60 A 192.0.2.4\n").to_string();
    let out = nodes[0]
        .kresctl(&["config", "set", "-p", "/local-data/records", &records])
        .expect("kresctl");
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("the fleet's store"), "{said}");
    for i in 0..3 {
        cluster.pause(i, false).expect("resumed");
    }
    kresctl_ok(
        &nodes[0],
        &["config", "set", "-p", "/local-data/records", &records],
    );
    converged(&mut nodes, "192.0.2.4");
    for node in nodes {
        node.stop();
    }
}
