//! Compatibility is the contract: upstream's kresctl (from the knot-resolver6 package in the
//! test bed) drives our daemon, and our kresctl drives upstream's daemon.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Setup, DNS_TIMEOUT, STOP_TIMEOUT};
use serde_json::Value;
use testbed::{dns, Bed};

const RECORDS: &str = "local-data:\n  records: |\n    i.test. 300 A 192.0.2.8\n";

/// Run the bed's (upstream's) kresctl against a socket given as a bed path.
fn upstream_kresctl(bed: &Bed, socket: &Path, args: &[&str]) -> std::process::Output {
    let socket = socket.to_string_lossy().into_owned();
    let mut all = vec!["-s", socket.as_str()];
    all.extend_from_slice(args);
    bed.run_installed("/usr/bin/kresctl", &all)
        .expect("upstream kresctl runs")
}

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn upstream_kresctl_drives_our_daemon() {
    let mut r =
        common::start(&Setup::new("interop-ours").workers(2).extra(RECORDS)).expect("start");
    let bed = r.bed;
    let sock = r.dir.bed("run/kres-api.sock");

    // Upstream's `config get` without --json/--yaml crashes whatever the server (argparse
    // overwrites its YAML default with None), so ask for YAML explicitly.
    let yaml = ok(&upstream_kresctl(bed, &sock, &["config", "get", "--yaml"]));
    assert!(yaml.contains("workers: 2"), "{yaml}");
    let json = ok(&upstream_kresctl(
        bed,
        &sock,
        &["config", "get", "--json", "-p", "/network"],
    ));
    let network: Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(
        network["listen"][0]["interface"],
        format!("127.0.0.1@{}", r.port)
    );

    ok(&upstream_kresctl(
        bed,
        &sock,
        &["config", "set", "-p", "/workers", "3"],
    ));
    assert_eq!(r.pids_named("kresd").len(), 3);
    // Upstream's delete sends no body; upstream's own server answers 500 to it, ours works.
    ok(&upstream_kresctl(
        bed,
        &sock,
        &["config", "delete", "-p", "/local-data"],
    ));
    let cfg: Value = serde_json::from_str(&ok(&upstream_kresctl(
        bed,
        &sock,
        &["config", "get", "--json"],
    )))
    .expect("JSON");
    assert!(cfg.get("local-data").is_none(), "{cfg}");

    ok(&upstream_kresctl(bed, &sock, &["reload"]));
    // The file still has the local data: reload brought it back.
    assert_eq!(
        dns::query_udp(r.dns(), "i.test.", dns::TYPE_A, DNS_TIMEOUT)
            .expect("answer")
            .a()
            .len(),
        1
    );

    let metrics: Value = serde_json::from_str(&ok(&upstream_kresctl(bed, &sock, &["metrics"])))
        .expect("JSON metrics");
    assert!(metrics.get("kresd:kresd0").is_some(), "{metrics}");
    let prom = ok(&upstream_kresctl(bed, &sock, &["metrics", "--prometheus"]));
    assert!(prom.contains("resolver_metrics_loaded"), "{prom}");
    // (kresctl 6.5.0 has no `pids` command; /processes is covered by our own tests.)
    ok(&upstream_kresctl(bed, &sock, &["schema", "--live"]));
    ok(&upstream_kresctl(bed, &sock, &["cache", "clear"]));
    // Our kresctl prints the daemon's OpenAPI description, the one it has built in too.
    let served: Value =
        serde_json::from_str(&ok(&r.kresctl(&["openapi"]).expect("kresctl"))).expect("JSON");
    let local: Value =
        serde_json::from_str(&ok(&r.kresctl(&["openapi", "--local"]).expect("kresctl")))
            .expect("JSON");
    assert_eq!(served["openapi"], "3.1.0");
    assert_eq!(served, local);

    ok(&upstream_kresctl(bed, &sock, &["stop"]));
    let status = r.launched.wait(STOP_TIMEOUT).expect("exit");
    assert_eq!(status.code(), Some(0));
    assert!(r.launched.tree().is_empty());
}

#[test]
fn our_kresctl_drives_upstreams_daemon() {
    let setup = Setup::new("interop-upstream").workers(2).extra(RECORDS);
    let mut upstream = common::start_upstream(&setup).expect("upstream starts");
    let api = upstream.api.clone();
    let kresctl = |args: &[&str]| {
        std::process::Command::new(common::KRESCTL)
            .arg("-s")
            .arg(&api)
            .args(args)
            .output()
            .expect("our kresctl")
    };

    let cfg: Value =
        serde_json::from_str(&ok(&kresctl(&["config", "get", "--json"]))).expect("JSON");
    assert_eq!(cfg["workers"], 2);
    assert!(ok(&kresctl(&["config", "get", "-p", "/workers"])).contains('2'));
    ok(&kresctl(&[
        "config",
        "set",
        "-p",
        "/local-data/records",
        "i.test. 300 A 192.0.2.9\n",
    ]));
    let server = upstream.dns();
    let answer = dns::query_udp(server, "i.test.", dns::TYPE_A, DNS_TIMEOUT).expect("answer");
    assert_eq!(
        answer.a(),
        vec!["192.0.2.9".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    let metrics: Value = serde_json::from_str(&ok(&kresctl(&["metrics"]))).expect("JSON metrics");
    assert!(metrics.get("kresd:kresd1").is_some(), "{metrics}");
    assert!(ok(&kresctl(&["metrics", "--prometheus"])).contains("resolver_request_total"));
    assert_eq!(ok(&kresctl(&["pids", "kresd"])).lines().count(), 2);
    ok(&kresctl(&["reload"]));
    // Upstream cannot delete (it answers 500 to a DELETE without a body): our kresctl reports it.
    let del = kresctl(&["config", "delete", "-p", "/local-data"]);
    assert_eq!(
        del.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&del.stderr)
    );
    // Upstream has no in-place upgrade: our kresctl says so, and nothing happens to it.
    let upgrade = kresctl(&["upgrade"]);
    let said = String::from_utf8_lossy(&upgrade.stderr);
    assert_eq!(upgrade.status.code(), Some(1), "{said}");
    assert!(said.contains("does not offer in-place upgrades"), "{said}");
    // Upstream has no dry run (it would apply a `?dry-run=true` PUT): our kresctl shows the
    // differences, says it cannot tell more, and sends no change.
    let mut wanted: Value =
        serde_json::from_str(&ok(&kresctl(&["config", "get", "--json"]))).expect("JSON");
    wanted["workers"] = Value::from(3);
    let file = std::env::temp_dir().join(format!("kres-interop-diff-{}.json", std::process::id()));
    std::fs::write(&file, serde_json::to_vec(&wanted).expect("JSON")).expect("write");
    let diff = kresctl(&["config", "diff", file.to_str().expect("UTF-8")]);
    let said = String::from_utf8_lossy(&diff.stderr);
    assert_eq!(diff.status.code(), Some(1), "{said}");
    assert!(said.contains("offers no dry run"), "{said}");
    assert!(
        String::from_utf8_lossy(&diff.stdout).contains("~ /workers: 2 -> 3"),
        "the differences are shown"
    );
    let _ = std::fs::remove_file(&file);
    assert_eq!(
        ok(&kresctl(&["pids", "kresd"])).lines().count(),
        2,
        "nothing applied"
    );
    // Nor an OpenAPI description.
    let openapi = kresctl(&["openapi"]);
    let said = String::from_utf8_lossy(&openapi.stderr);
    assert_eq!(openapi.status.code(), Some(1), "{said}");
    assert!(
        said.contains("does not offer an OpenAPI description"),
        "{said}"
    );
    ok(&kresctl(&["stop"]));
    let status = upstream
        .launched
        .wait(Duration::from_secs(60))
        .expect("upstream exits");
    assert!(status.success(), "{status:?}");
}

/// The cache's size changed by `kresctl config set` while the resolver runs: upstream's
/// kresctl against our daemon, ours against upstream's manager, both take it (by a rolling
/// restart on a new cache `top`). The time each takes is printed, not asserted.
#[test]
fn a_cache_size_change_is_taken_by_both_daemons_from_both_kresctls() {
    let setup = Setup::new("interop-cache-size").workers(2).extra(RECORDS);
    let r = common::start(&setup).expect("start");
    let sock = r.dir.bed("run/kres-api.sock");
    let started = std::time::Instant::now();
    ok(&upstream_kresctl(
        r.bed,
        &sock,
        &["config", "set", "-p", "/cache/size-max", "100M"],
    ));
    println!("ours, upstream's kresctl: {:?}", started.elapsed());
    let started = std::time::Instant::now();
    ok(&r
        .kresctl(&["config", "set", "-p", "/cache/size-max", "50M"])
        .expect("kresctl"));
    println!("ours, our kresctl: {:?}", started.elapsed());
    let size = ok(&r
        .kresctl(&["config", "get", "--json", "-p", "/cache/size-max"])
        .expect("kresctl"));
    assert_eq!(size.trim(), "\"50M\"");
    assert_eq!(r.a_records("i.test."), vec!["192.0.2.8"]);
    r.stop();

    let upstream = common::start_upstream(&setup).expect("upstream starts");
    let api = upstream.api.clone();
    let kresctl = |args: &[&str]| {
        std::process::Command::new(common::KRESCTL)
            .arg("-s")
            .arg(&api)
            .args(args)
            .output()
            .expect("our kresctl")
    };
    let started = std::time::Instant::now();
    ok(&kresctl(&[
        "config",
        "set",
        "-p",
        "/cache/size-max",
        "100M",
    ]));
    println!("upstream's, our kresctl: {:?}", started.elapsed());
    let size = ok(&kresctl(&[
        "config",
        "get",
        "--json",
        "-p",
        "/cache/size-max",
    ]));
    assert_eq!(size.trim(), "\"100M\"");
    let answer = dns::query_udp(upstream.dns(), "i.test.", dns::TYPE_A, DNS_TIMEOUT);
    assert_eq!(answer.expect("answer").a().len(), 1);
    stop_upstream(upstream, &kresctl);
}

/// Stop upstream's manager through our kresctl and wait for it to exit.
fn stop_upstream(
    mut upstream: common::Upstream,
    kresctl: &dyn Fn(&[&str]) -> std::process::Output,
) {
    ok(&kresctl(&["stop"]));
    let status = upstream
        .launched
        .wait(Duration::from_secs(60))
        .expect("upstream exits");
    assert!(status.success(), "{status:?}");
}

const ZONE: &str = "x.test. 300 A 192.0.2.30\ny.test. 300 A 192.0.2.31\nz.test. 300 A 192.0.2.32\n";

/// Run our kresctl against `socket` with `stdin` as its standard input (a pipe).
fn our_kresctl_with_input(socket: &Path, args: &[&str], stdin: &str) -> std::process::Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = std::process::Command::new(common::KRESCTL)
        .arg("-s")
        .arg(socket)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kresctl starts");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin.as_bytes()).expect("write stdin");
    drop(input);
    child.wait_with_output().expect("kresctl ends")
}

/// The A records `server` answers for `name`.
fn a_records(server: std::net::SocketAddr, name: &str) -> Vec<String> {
    dns::query_udp(server, name, dns::TYPE_A, DNS_TIMEOUT)
        .expect("answer")
        .a()
        .iter()
        .map(|a| a.to_string())
        .collect()
}

/// A zone text of several lines set through each kresctl reaches each daemon whole and reads
/// back as it was set; a section replaced whole by upstream's kresctl is replaced by ours as
/// by upstream's; a dry run is refused where the server would apply it.
#[test]
fn a_zone_text_set_by_either_kresctl_reaches_either_daemon_whole() {
    let setup = Setup::new("interop-zone-text").workers(2).extra(RECORDS);

    // Upstream's kresctl, our daemon. (Upstream's kresctl reads one line of standard input
    // and folds a file's lines as YAML: a JSON string is how it sends several lines.)
    let r = common::start(&setup).expect("start");
    let sock = r.dir.bed("run/kres-api.sock");
    let json = serde_json::to_string(ZONE).expect("JSON");
    let said = ok(&upstream_kresctl(
        r.bed,
        &sock,
        &["config", "set", "-p", "/local-data/records", &json],
    ));
    assert_eq!(
        said, "",
        "upstream's kresctl prints nothing, as against its own daemon"
    );
    let got = ok(&upstream_kresctl(
        r.bed,
        &sock,
        &["config", "get", "--json", "-p", "/local-data/records"],
    ));
    assert_eq!(
        serde_json::from_str::<Value>(&got).expect("JSON"),
        Value::from(ZONE)
    );
    assert_eq!(a_records(r.dns(), "z.test."), vec!["192.0.2.32"]);
    testbed::write(
        &r.dir.host("local-data.yaml"),
        "addresses:\n  w.test: 192.0.2.33\n",
    )
    .expect("write");
    ok(&upstream_kresctl(
        r.bed,
        &sock,
        &[
            "config",
            "set",
            "-p",
            "/local-data",
            &r.dir.bed("local-data.yaml").display().to_string(),
        ],
    ));
    assert_eq!(a_records(r.dns(), "w.test."), vec!["192.0.2.33"]);
    assert!(a_records(r.dns(), "z.test.").is_empty(), "replaced whole");
    // Ours, on the same daemon: the zone text on standard input, the same answers.
    let said = our_kresctl_with_input(
        &r.api,
        &["config", "set", "-p", "/local-data/records"],
        ZONE,
    );
    assert!(
        said.status.success(),
        "{}",
        String::from_utf8_lossy(&said.stderr)
    );
    assert_eq!(a_records(r.dns(), "y.test."), vec!["192.0.2.31"]);
    r.stop();

    // Our kresctl, upstream's daemon.
    let mut upstream = common::start_upstream(&setup).expect("upstream starts");
    let api = upstream.api.clone();
    let said = our_kresctl_with_input(&api, &["config", "set", "-p", "/local-data/records"], ZONE);
    assert!(
        said.status.success(),
        "{}",
        String::from_utf8_lossy(&said.stderr)
    );
    assert!(
        !String::from_utf8_lossy(&said.stderr).contains("Type"),
        "no prompt"
    );
    for (name, ip) in [("x.test.", "192.0.2.30"), ("z.test.", "192.0.2.32")] {
        assert_eq!(a_records(upstream.dns(), name), vec![ip], "{name}");
    }
    let got = our_kresctl_with_input(
        &api,
        &["config", "get", "--json", "-p", "/local-data/records"],
        "",
    );
    let got: Value = serde_json::from_slice(&got.stdout).expect("JSON");
    assert_eq!(got, Value::from(ZONE));
    // Replacing the section whole: as upstream's kresctl does it, and said.
    let said = our_kresctl_with_input(
        &api,
        &["config", "set", "-p", "/local-data"],
        "addresses:\n  w.test: 192.0.2.33\n",
    );
    assert!(
        said.status.success(),
        "{}",
        String::from_utf8_lossy(&said.stderr)
    );
    assert!(
        String::from_utf8_lossy(&said.stderr).contains("removed: /local-data/records"),
        "{}",
        String::from_utf8_lossy(&said.stderr)
    );
    assert_eq!(a_records(upstream.dns(), "w.test."), vec!["192.0.2.33"]);
    // A section that is not there yet (upstream's manager answers its GET with an error).
    let said = our_kresctl_with_input(&api, &["config", "set", "-p", "/dns64"], "enable: false\n");
    assert!(
        said.status.success(),
        "{}",
        String::from_utf8_lossy(&said.stderr)
    );
    assert!(
        said.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&said.stderr)
    );
    // Upstream's manager would apply a `?dry-run=true` change: ours refuses to send it.
    let said = our_kresctl_with_input(
        &api,
        &["config", "set", "--dry-run", "-p", "/workers", "3"],
        "",
    );
    assert_eq!(said.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&said.stderr).contains("offers no dry run"),
        "{}",
        String::from_utf8_lossy(&said.stderr)
    );
    let workers = our_kresctl_with_input(&api, &["config", "get", "--json", "-p", "/workers"], "");
    assert_eq!(String::from_utf8_lossy(&workers.stdout).trim(), "2");
    let said = our_kresctl_with_input(&api, &["stop"], "");
    assert!(said.status.success());
    let status = upstream
        .launched
        .wait(Duration::from_secs(60))
        .expect("upstream exits");
    assert!(status.success(), "{status:?}");
}
