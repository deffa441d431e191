//! The generated Lua, section by section, proven on real kresd under our daemon: over DNS
//! where DNS can show a section (local data, views, forwarding, cache TTL bounds, DNS64, NSID),
//! and through a worker's control socket or the logs where it cannot (options, DNSSEC,
//! logging, monitoring, custom Lua).

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::net::UnixStream;
use std::path::Path;

use common::{Setup, DNS_TIMEOUT, START_TIMEOUT};
use testbed::{dns, os, Launched};

/// Evaluate a Lua expression in worker `id` through its control socket (kresd's length-prefixed
/// `__json` mode) and return the JSON result.
fn control(r: &common::Resolver, id: u32, expr: &str) -> serde_json::Value {
    let path = r.dir.host(&format!("run/control/{id}"));
    let mut sock =
        UnixStream::connect(&path).unwrap_or_else(|e| panic!("connect {}: {e}", path.display()));
    sock.set_read_timeout(Some(DNS_TIMEOUT)).expect("timeout");
    sock.write_all(format!("__json\n{expr}\n").as_bytes())
        .expect("send");
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let payload = loop {
        let n = sock.read(&mut chunk).expect("control answer");
        assert!(n > 0, "control socket closed; got {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
        let body = buf.strip_prefix(b"> ").unwrap_or(&buf);
        if body.len() >= 4 {
            let len = u32::from_be_bytes([body[0], body[1], body[2], body[3]]) as usize;
            if body.len() >= 4 + len {
                break body[4..4 + len].to_vec();
            }
        }
    };
    serde_json::from_slice(&payload)
        .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(&payload).into()))
}

fn ask(r: &common::Resolver, name: &str, qtype: u16) -> dns::Response {
    dns::query_udp(r.dns(), name, qtype, DNS_TIMEOUT)
        .unwrap_or_else(|e| panic!("{name}: {e:#}\n{}", r.launched.output.text()))
}

const WORKER_SECTIONS: &str = r#"nsid: lua-nsid
hostname: lua-host.example
options:
  minimize: false
  glue-checking: strict
  query-case-randomization: false
dnssec:
  negative-trust-anchors: [insecure.example]
monitoring:
  metrics: always
local-data:
  ttl: 2m
  addresses:
    a.test: [192.0.2.1, 2001:db8::1]
  records: |
    r.test. 300 A 192.0.2.2
    t.test. 300 TXT "a]]b" "c'd"
  rules:
    - name: [nx.test]
      subtree: nxdomain
    - name: [empty.test]
      subtree: empty
    - name: [red.test]
      subtree: redirect
      address: [192.0.2.3]
lua:
"#;

#[test]
fn local_data_nsid_and_worker_sections_reach_kresd() {
    let bed = testbed::Bed::get().expect("bed");
    // The script file lives in the test's scratch space; the path is given as the bed sees it.
    let file_dir = bed.test_dir("lua-script-file").expect("dir");
    testbed::write(
        &file_dir.host("custom.lua"),
        "log_notice(ffi.C.LOG_GRP_SYSTEM, 'script ' .. 'file ran')\n",
    )
    .expect("script file");
    let extra = format!(
        "{WORKER_SECTIONS}  script-file: {}\n",
        file_dir.bed("custom.lua").display()
    );
    let setup = Setup::new("lua-worker")
        .extra(&extra)
        .logging("  level: info\n  target: stderr\n  groups: [cache, manager]\n")
        .cache("  ttl-max: 5m\n");
    let r = common::start(&setup).expect("resolver starts");

    // local-data.addresses, with local-data.ttl.
    let a = ask(&r, "a.test.", dns::TYPE_A);
    assert_eq!(a.rcode, dns::RCODE_NOERROR);
    assert_eq!(a.a(), vec![Ipv4Addr::new(192, 0, 2, 1)]);
    assert_eq!(a.answers[0].ttl, 120, "local-data.ttl applies");
    let aaaa = ask(&r, "a.test.", dns::TYPE_AAAA);
    assert_eq!(
        aaaa.aaaa(),
        vec!["2001:db8::1".parse::<Ipv6Addr>().unwrap()]
    );
    // local-data.records: zone-file text reaches kresd byte for byte (`]]` and quotes included).
    assert_eq!(
        ask(&r, "r.test.", dns::TYPE_A).a(),
        vec![Ipv4Addr::new(192, 0, 2, 2)]
    );
    let txt = ask(&r, "t.test.", dns::TYPE_TXT);
    assert_eq!(
        txt.answers.first().map(|rec| rec.data.clone()),
        Some(dns::RData::Txt(vec!["a]]b".into(), "c'd".into()])),
        "{txt:?}"
    );
    // local-data.rules: subtrees. `nxdomain` includes the apex; `empty` is an empty zone
    // (NODATA at the apex, NXDOMAIN below).
    assert_eq!(ask(&r, "nx.test.", dns::TYPE_A).rcode, dns::RCODE_NXDOMAIN);
    assert_eq!(
        ask(&r, "x.nx.test.", dns::TYPE_A).rcode,
        dns::RCODE_NXDOMAIN
    );
    assert_eq!(
        ask(&r, "x.empty.test.", dns::TYPE_A).rcode,
        dns::RCODE_NXDOMAIN
    );
    let empty = ask(&r, "empty.test.", dns::TYPE_A);
    assert_eq!(empty.rcode, dns::RCODE_NOERROR);
    assert!(empty.answers.is_empty(), "{empty:?}");
    let red = ask(&r, "deep.below.red.test.", dns::TYPE_A);
    assert_eq!(red.a(), vec![Ipv4Addr::new(192, 0, 2, 3)], "{red:?}");

    // nsid: the configured prefix plus the worker id.
    let with_nsid =
        dns::query_udp_nsid(r.dns(), "a.test.", dns::TYPE_A, DNS_TIMEOUT).expect("answer");
    assert_eq!(with_nsid.nsid.as_deref(), Some(&b"lua-nsid0"[..]));

    // Sections DNS cannot show, read back from the worker.
    assert_eq!(control(&r, 0, "hostname()"), "lua-host.example");
    assert_eq!(control(&r, 0, "option('NO_MINIMIZE')"), true);
    assert_eq!(control(&r, 0, "option('NO_0X20')"), true);
    assert_eq!(control(&r, 0, "cache.max_ttl()"), 300);
    assert_eq!(control(&r, 0, "log_level()"), "info");
    assert_eq!(control(&r, 0, "log_target()"), "stderr");
    assert_eq!(control(&r, 0, "log_groups()"), serde_json::json!(["cache"]));
    assert_eq!(
        control(&r, 0, "trust_anchors.insecure[1]"),
        "insecure.example"
    );
    // monitoring: `always` loads stats; the manager's collection functions exist.
    assert_eq!(control(&r, 0, "stats ~= nil"), true);
    assert_eq!(control(&r, 0, "type(collect_statistics)"), "function");
    assert_eq!(control(&r, 0, "type(collect_lazy_statistics)"), "function");

    // Custom Lua from a file (upstream's template cannot import it).
    r.launched
        .output
        .wait_for("script file ran", START_TIMEOUT)
        .expect("script-file ran");
}

#[test]
fn a_view_refuses_the_loopback_subnet() {
    let r = common::start(&Setup::new("lua-views").extra(
        "views:\n  - subnets: [127.0.0.0/8]\n    answer: refused\nlocal-data:\n  addresses:\n    a.test: 192.0.2.1\n",
    ))
    .expect("resolver starts");
    assert_eq!(ask(&r, "a.test.", dns::TYPE_A).rcode, dns::RCODE_REFUSED);
}

#[test]
fn rate_limiting_truncates_a_flood() {
    // slip 1: every restricted answer is sent truncated rather than dropped, so DNS shows it.
    let r = common::start(&Setup::new("lua-ratelimit").extra(
        "rate-limiting:\n  enable: true\n  rate-limit: 1\n  instant-limit: 1\n  slip: 1\nlocal-data:\n  addresses:\n    a.test: 192.0.2.1\n",
    ))
    .expect("resolver starts");
    const TC: u16 = 0x0200;
    let truncated = (0..20)
        .map(|_| ask(&r, "a.test.", dns::TYPE_A))
        .filter(|resp| resp.flags & TC != 0)
        .count();
    assert!(truncated > 0, "no truncated answer among 20 rapid queries");
}

#[test]
fn script_only_workers_keep_their_control_socket() {
    let r = common::start(&Setup::new("lua-script-only").extra(
        "lua:\n  script-only: true\n  script: \"io.stderr:write('only custom Lua\\\\n')\"\n",
    ))
    .expect("resolver starts");
    assert_eq!(control(&r, 0, "type(collect_statistics)"), "function");
    // The manager's collection loads `stats` and the answer counters there too.
    assert_eq!(
        control(&r, 0, "collect_labelled_statistics().counts.cache.miss"),
        0
    );
    r.launched
        .output
        .wait_for("only custom Lua", START_TIMEOUT)
        .expect("the script ran");
}

/// An authoritative server for `fwd.test.` on a free port.
struct Knotd {
    port: u16,
    _launched: Launched,
}

const ZONE: &str = "$ORIGIN fwd.test.
$TTL 3600
@ SOA ns.fwd.test. admin.fwd.test. 1 3600 900 604800 60
@ NS ns
ns A 127.0.0.1
short 1 A 192.0.2.51
long 86400 A 192.0.2.52
v4only 3600 A 192.0.2.10
";

fn start_knotd(bed: &'static testbed::Bed) -> Knotd {
    let dir = bed.test_dir("knotd").expect("dir");
    let port = testbed::free_port().expect("port");
    testbed::write(&dir.host("fwd.test.zone"), ZONE).expect("zone");
    std::fs::create_dir_all(dir.host("db")).expect("db dir");
    let conf = format!(
        "server:\n  listen: 127.0.0.1@{port}\n  rundir: {run}\nlog:\n  - target: stderr\n    any: info\ndatabase:\n  storage: {db}\nzone:\n  - domain: fwd.test\n    file: {zone}\n",
        run = dir.bed("db").display(),
        db = dir.bed("db").display(),
        zone = dir.bed("fwd.test.zone").display(),
    );
    testbed::write(&dir.host("knot.conf"), &conf).expect("knot.conf");
    let launched = bed
        .launch_installed(
            Path::new("/usr/sbin/knotd"),
            &[&os("-c"), &os(dir.bed("knot.conf"))],
            &[],
        )
        .expect("launch knotd");
    launched
        .output
        .wait_for("loaded, serial", START_TIMEOUT)
        .expect("knotd loaded the zone");
    Knotd {
        port,
        _launched: launched,
    }
}

#[test]
fn forwarding_cache_ttl_bounds_and_dns64() {
    let bed = testbed::Bed::get().expect("bed");
    let knotd = start_knotd(bed);
    let auth = SocketAddr::from(([127, 0, 0, 1], knotd.port));
    assert_eq!(
        dns::query_udp(auth, "short.fwd.test.", dns::TYPE_A, DNS_TIMEOUT)
            .expect("knotd answers")
            .answers[0]
            .ttl,
        1
    );
    let extra = format!(
        "forward:\n  - subtree: fwd.test\n    servers: ['127.0.0.1@{}']\n    options: {{authoritative: false, dnssec: false}}\ndns64:\n  enable: true\n",
        knotd.port
    );
    let setup = Setup::new("lua-forward")
        .extra(&extra)
        .cache("  ttl-min: 1m\n  ttl-max: 10m\n");
    let r = common::start(&setup).expect("resolver starts");

    assert_eq!(control(&r, 0, "cache.min_ttl()"), 60);
    assert_eq!(control(&r, 0, "cache.max_ttl()"), 600);
    // Forwarded, and the TTLs clamped into [ttl-min, ttl-max].
    for (name, ip, bound) in [
        ("long.fwd.test.", Ipv4Addr::new(192, 0, 2, 52), 590..=600),
        ("short.fwd.test.", Ipv4Addr::new(192, 0, 2, 51), 60..=60),
    ] {
        let first = ask(&r, name, dns::TYPE_A);
        assert_eq!(first.a(), vec![ip], "{name}: {first:?}");
        assert!(
            bound.contains(&first.answers[0].ttl),
            "{name}: TTL {} not in {bound:?}",
            first.answers[0].ttl
        );
    }
    // DNS64 synthesises AAAA from the forwarded A with the default prefix.
    let aaaa = ask(&r, "v4only.fwd.test.", dns::TYPE_AAAA);
    assert_eq!(
        aaaa.aaaa(),
        vec!["64:ff9b::c000:20a".parse::<Ipv6Addr>().unwrap()],
        "{aaaa:?}"
    );
}
