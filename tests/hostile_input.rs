//! Hostile API requests against the real daemon on real kresd: bodies whose aliases nest or
//! amplify, JSON Patches that grow the document, huge and deep bodies in every format. Each is
//! refused with a bounded answer naming the bound, and afterwards the root process is the same
//! and small, the workers are the same processes, DNS answers, and the running configuration
//! is untouched.

mod common;

use common::{Resolver, Setup, DNS_TIMEOUT};
use testbed::dns;

/// The root process's own memory (anonymous: heap and stacks) may not grow by more than this,
/// whatever a request does (the root parses no request: it grows only by what its own work
/// takes). Its program text is left out: the root gives it back at READY, and the code a
/// case runs maps again, shared with the manager.
const ROOT_RSS_GROWTH_KIB: u64 = 4 * 1024;

/// The manager's resident memory after a refused request (it parses, it is not bloated).
const MANAGER_RSS_CEILING_KIB: u64 = 256 * 1024;

/// No answer to a refused request is larger than this.
const ANSWER_CEILING: usize = 64 * 1024;

struct Before {
    root: i32,
    /// The root's resident memory before the hostile requests.
    root_rss: u64,
    workers: Vec<i32>,
    etag: String,
}

fn before(r: &Resolver) -> Before {
    Before {
        root: r.launched.pid(),
        root_rss: testbed::procs::anonymous_kib(r.launched.pid()).expect("root memory"),
        workers: r.pids_named("kresd"),
        etag: r.etag(),
    }
}

/// Send `body` with `content_type` to `method path`; the status and the answer's size.
fn send(r: &Resolver, method: &str, path: &str, content_type: &str, body: &[u8]) -> (u16, usize) {
    let resp = testbed::http::request(
        &r.api,
        method,
        path,
        &[("Content-Type", content_type)],
        body,
    )
    .expect("answered");
    (resp.status, resp.body.len())
}

/// Everything that must hold after a hostile request.
#[track_caller]
fn intact(r: &Resolver, b: &Before, case: &str) {
    let tree = r.launched.tree();
    assert!(
        tree.iter().any(|p| p.pid == b.root),
        "{case}: the root is alive"
    );
    let root_rss = testbed::procs::anonymous_kib(b.root).expect("root memory");
    assert!(
        root_rss < b.root_rss + ROOT_RSS_GROWTH_KIB,
        "{case}: root anonymous memory {root_rss} KiB, {} KiB before",
        b.root_rss
    );
    for manager in r.pids_named("kres-manager") {
        let rss = testbed::procs::rss_kib(manager).unwrap_or(0);
        assert!(
            rss < MANAGER_RSS_CEILING_KIB,
            "{case}: manager RSS {rss} KiB"
        );
    }
    assert_eq!(
        r.pids_named("kresd"),
        b.workers,
        "{case}: workers unchanged"
    );
    assert_eq!(r.etag(), b.etag, "{case}: configuration intact");
    let resp =
        dns::query_udp(r.dns(), "alive.test.", dns::TYPE_A, DNS_TIMEOUT).expect("DNS answers");
    assert_eq!(
        resp.a(),
        vec![std::net::Ipv4Addr::new(192, 0, 2, 9)],
        "{case}"
    );
}

fn resolver(name: &'static str) -> Resolver {
    let setup = Setup::new(name)
        .workers(2)
        .extra("local-data:\n  records: |\n    alive.test. 300 A 192.0.2.9\n");
    common::start(&setup).expect("resolver starts")
}

#[test]
fn bodies_whose_aliases_nest_or_amplify_are_refused() {
    let r = resolver("hostile-aliases");
    let b = before(&r);

    // ~22,000 levels of nesting from a few dozen KB.
    let mut nest = String::from("a0: &a0 [x]\n");
    for i in 1..22_000 {
        nest.push_str(&format!("a{i}: &a{i} [*a{}]\n", i - 1));
    }
    let (status, size) = send(
        &r,
        "PUT",
        "/v1/config/lua",
        "application/yaml",
        nest.as_bytes(),
    );
    assert_eq!(status, 400, "nesting through aliases");
    assert!(size < ANSWER_CEILING, "answer of {size} bytes");
    intact(&r, &b, "nesting through aliases");

    // One 10 KB string referenced 50,000 times: 500 MB once expanded.
    let mut amplify = format!("script: &s {}\nl:\n", "x".repeat(10_000));
    for _ in 0..50_000 {
        amplify.push_str("  - *s\n");
    }
    let (status, size) = send(
        &r,
        "PUT",
        "/v1/config/lua",
        "application/yaml",
        amplify.as_bytes(),
    );
    assert_eq!(status, 400, "alias amplification");
    assert!(size < ANSWER_CEILING, "answer of {size} bytes");
    intact(&r, &b, "alias amplification");
    r.stop();
}

#[test]
fn json_patches_that_grow_the_document_are_refused() {
    let r = resolver("hostile-patch");
    let b = before(&r);
    let mut ops =
        vec![serde_json::json!({"op": "add", "path": "/growth", "value": ["x".repeat(1000)]})];
    for _ in 0..40 {
        ops.push(serde_json::json!({"op": "copy", "from": "/growth", "path": "/growth/-"}));
    }
    let body = serde_json::to_vec(&ops).expect("json");
    assert!(body.len() < 4096, "a small request");
    let (status, size) = send(&r, "PATCH", "/v1/config", "application/json", &body);
    assert_eq!(status, 413, "patch growth");
    assert!(size < ANSWER_CEILING);
    intact(&r, &b, "patch growth");
    r.stop();
}

#[test]
fn huge_and_deep_bodies_in_every_format_are_refused() {
    let r = resolver("hostile-bodies");
    let b = before(&r);
    let deep =
        |open: &str, close: &str| format!("{}{}", open.repeat(100_000), close.repeat(100_000));
    let cases: Vec<(&str, &str, Vec<u8>)> = vec![
        ("deep JSON", "application/json", deep("[", "]").into_bytes()),
        ("deep YAML", "application/yaml", deep("[", "]").into_bytes()),
        (
            "deep TOML",
            "application/toml",
            format!("a = {}", deep("[", "]")).into_bytes(),
        ),
        // A huge key quoted back in an error must not make a huge answer.
        (
            "huge key",
            "application/yaml",
            format!("{}: 1\n", "k".repeat(5 << 20)).into_bytes(),
        ),
        (
            "huge invalid TOML",
            "application/toml",
            format!("a = \"{}", "x".repeat(5 << 20)).into_bytes(),
        ),
    ];
    for (case, content_type, body) in cases {
        let (status, size) = send(&r, "PUT", "/v1/config/lua", content_type, &body);
        assert!(status == 400 || status == 413, "{case}: status {status}");
        assert!(size < ANSWER_CEILING, "{case}: answer of {size} bytes");
        intact(&r, &b, case);
    }
    // Many invalid entries: the errors reported are bounded too.
    let many: serde_json::Value = (0..50_000)
        .map(|i| (format!("bad{i}"), serde_json::json!(i)))
        .collect::<serde_json::Map<_, _>>()
        .into();
    let body = serde_json::to_vec(&many).expect("json");
    let (status, size) = send(&r, "PUT", "/v1/config/network", "application/json", &body);
    assert_eq!(status, 400, "many errors");
    assert!(size < ANSWER_CEILING, "many errors: answer of {size} bytes");
    intact(&r, &b, "many errors");
    r.stop();
}

#[test]
fn a_hung_policy_loader_is_stopped_at_its_deadline_and_nothing_changes() {
    let setup = Setup::new("hostile-policy-loader")
        .workers(2)
        .env(kres_daemon::manager::POLICY_LOADER_TIMEOUT_VAR, "2")
        .extra("local-data:\n  records: |\n    alive.test. 300 A 192.0.2.9\n");
    let r = common::start(&setup).expect("resolver starts");
    let b = before(&r);
    // Lua that never ends, run by the policy-loader.
    let (status, size) = send(
        &r,
        "PUT",
        "/v1/config/lua",
        "application/json",
        br#"{"policy-script": "while true do end"}"#,
    );
    assert_eq!(status, 400);
    assert!(size < ANSWER_CEILING);
    r.launched
        .output
        .wait_for("did not finish within 2 s", common::START_TIMEOUT)
        .expect("the deadline is reported");
    assert!(r.pids_named("kresd").len() == 2, "no policy-loader left");
    intact(&r, &b, "hung policy-loader");
    r.stop();
}
