//! A fleet's convergence: N resolvers (ours) on one three-member etcd on loopback, a record set
//! through one node's API (`PUT /v1/config/local-data/addresses`, which writes the fleet's
//! document to etcd); the time from the request to the last node answering the new record,
//! for each fleet size. And what following a fleet costs a node: the control plane's PSS with
//! `fleet` against the same resolver without it, in the same run. Upstream has no fleet in
//! 6.5 (its Kafka branch polls every 5 s), so there is no upstream column.
//!
//! Usage: cargo build --release --bins && target/release/fleet [--sizes 5,20,50] [--changes N]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bench::{control_plane_pss_kib, launch, median, write_config, Flavor};
use nix::sys::signal::Signal;
use testbed::etcd::{EtcdCluster, Security};
use testbed::notify::NotifyListener;
use testbed::{Bed, Launched, TestDir};

/// One node: its process tree, notify socket (read, as systemd would), directory and port.
struct Node {
    launched: Launched,
    notify: NotifyListener,
    dir: TestDir,
    port: u16,
}

/// The fleet's part of a node's configuration.
fn fleet_yaml(node: usize, cluster: &EtcdCluster) -> String {
    format!(
        "fleet:\n  node: n{node}\n  etcd:\n    endpoints: [{}]\n    prefix: /knot-resolver/bench\n",
        cluster.endpoints().join(", ")
    )
}

fn start(bed: &Bed, name: &str, extra: &str) -> Result<Node> {
    let dir = bed.test_dir(name)?;
    let port = testbed::free_port()?;
    write_config(&dir, port, 1, extra)?;
    let (launched, mut notify) = launch(bed, Flavor::Ours, &dir)?;
    notify.wait_for("READY=1", Duration::from_secs(120))?;
    Ok(Node {
        launched,
        notify,
        dir,
        port,
    })
}

/// Whether `node` answers `fleet.test.` with `address`.
fn answers(node: &Node, address: &str) -> bool {
    let server = SocketAddr::from(([127, 0, 0, 1], node.port));
    testbed::dns::query_udp(
        server,
        "fleet.test.",
        testbed::dns::TYPE_A,
        Duration::from_millis(200),
    )
    .is_ok_and(|r| r.a().iter().any(|a| a.to_string() == address))
}

/// Set the record through the first node's API; the time until every node answers it.
fn change(nodes: &mut [Node], address: &str) -> Result<Duration> {
    let began = Instant::now();
    // (`local-data/records` is each node's own: the benchmark's configuration sets it.)
    let body = serde_json::json!({"fleet.test": address}).to_string();
    let answer = testbed::http::request(
        &nodes[0].dir.host("run/kres-api.sock"),
        "PUT",
        "/v1/config/local-data/addresses",
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    )?;
    anyhow::ensure!(
        answer.status == 200,
        "PUT: {} {}",
        answer.status,
        answer.text()
    );
    let deadline = began + Duration::from_secs(60);
    for i in 0..nodes.len() {
        loop {
            for node in nodes.iter_mut() {
                node.notify.drain()?;
            }
            if answers(&nodes[i], address) {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "node {i} never answered {address}"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    Ok(began.elapsed())
}

fn stop(node: Node) {
    let Node { mut launched, .. } = node;
    let _ = launched.signal(Signal::SIGINT);
    let _ = launched.wait(Duration::from_secs(60));
}

fn main() -> Result<()> {
    let mut sizes = vec![5usize, 20, 50];
    let mut changes = 10usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{arg} needs a value"))?;
        match arg.as_str() {
            "--sizes" => {
                sizes = value
                    .split(',')
                    .map(|s| bench::number(s, "--sizes"))
                    .collect::<Result<_>>()?
            }
            "--changes" => changes = bench::number(&value, "--changes")?,
            other => anyhow::bail!("unknown argument {other}"),
        }
    }
    let bed = Bed::get()?;
    println!("fleet benchmark: a record set on one node until every node answers it ({changes} changes per size)");
    println!(
        "{:<8} {:>10} {:>10} {:>10}",
        "nodes", "p50 ms", "p90 ms", "max ms"
    );
    for &size in &sizes {
        let cluster = EtcdCluster::start(Security::Plain)?;
        let mut nodes = Vec::new();
        for i in 0..size {
            nodes.push(start(
                bed,
                &format!("bench-fleet-{size}-{i}"),
                &fleet_yaml(i, &cluster),
            )?);
        }
        let mut times = Vec::new();
        for n in 0..changes {
            let address = format!("192.0.2.{}", n % 250 + 1);
            times.push(change(&mut nodes, &address)?.as_secs_f64() * 1e3);
        }
        times.sort_by(|a, b| a.total_cmp(b));
        let p90 = times[(times.len() * 9 / 10).min(times.len() - 1)];
        println!(
            "{size:<8} {:>10.1} {p90:>10.1} {:>10.1}",
            median(times.clone()),
            times[times.len() - 1]
        );
        if size == sizes[0] {
            let alone = start(bed, "bench-fleet-alone", "")?;
            let with = control_plane_pss_kib(&nodes[0].launched);
            let without = control_plane_pss_kib(&alone.launched);
            println!(
                "control plane PSS: {:.1} MiB with fleet, {:.1} MiB without",
                with as f64 / 1024.0,
                without as f64 / 1024.0
            );
            stop(alone);
        }
        for node in nodes {
            stop(node);
        }
    }
    Ok(())
}
