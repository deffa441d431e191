//! `?dry-run=true` on real kresd: a change is validated, planned, its sockets bound and its
//! canary run, and nothing else: the configuration, the ETag and the worker pids stay. The
//! answer predicts what the same change then does for real (which workers restart or start,
//! or only a rules reset); a configuration whose canary fails is refused by the dry run.

mod common;

use std::collections::BTreeMap;

use common::{Resolver, Setup, DNS_TIMEOUT};
use serde_json::Value;
use testbed::dns;

const RECORDS: &str = "local-data:\n  addresses:\n    dry.test: 192.0.2.100\n";

/// The kresd workers' pids by name, from `/processes`.
fn workers(r: &Resolver) -> BTreeMap<String, i64> {
    let table = json(&r.http("GET", "/processes/kresd", b"").expect("GET"));
    table
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|p| Some((p["name"].as_str()?.to_owned(), p["pid"].as_i64()?)))
        .collect()
}

fn json(response: &testbed::http::HttpResponse) -> Value {
    serde_json::from_slice(&response.body).expect("a JSON answer")
}

fn etag(r: &Resolver) -> String {
    r.http("GET", "/v1/config", b"")
        .expect("GET")
        .header("etag")
        .expect("an ETag")
        .to_owned()
}

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn answers(r: &Resolver, ip: &str) -> bool {
    dns::query_udp(r.dns(), "dry.test.", dns::TYPE_A, DNS_TIMEOUT)
        .is_ok_and(|a| a.a().iter().any(|a| a.to_string() == ip))
}

/// The workers `after` a change are those `before` it, with exactly `restart` restarted (new
/// pids) and `start` added.
fn did_as_predicted(
    before: &BTreeMap<String, i64>,
    after: &BTreeMap<String, i64>,
    restart: &[String],
    start: &[String],
) {
    for (name, pid) in before {
        assert_eq!(
            after.get(name) != Some(pid),
            restart.contains(name),
            "{name}: restarted exactly when predicted ({restart:?})"
        );
    }
    let added: Vec<String> = after
        .keys()
        .filter(|n| !before.contains_key(*n))
        .cloned()
        .collect();
    assert_eq!(added, start, "started as predicted");
}

#[test]
fn a_dry_run_changes_nothing_and_predicts_the_change() {
    let setup = Setup::new("dry-run").workers(2).extra(RECORDS);
    let r = common::start(&setup).expect("start");
    let (pids, tag) = (workers(&r), etag(&r));
    assert_eq!(pids.len(), 2);

    // A worker-affecting change: scale to 3 (and a cache setting every worker reads).
    let ops = br#"[{"op": "replace", "path": "/workers", "value": 3},
                   {"op": "add", "path": "/cache/ttl-max", "value": "2d"}]"#;
    let dry = r
        .http("PATCH", "/v1/config?dry-run=true", ops)
        .expect("PATCH");
    assert_eq!(dry.status, 200, "{}", dry.text());
    let plan = json(&dry);
    assert_eq!(plan["dry-run"], Value::Bool(true));
    assert_eq!(plan["workers"]["action"], "restart", "{plan:#}");
    assert!(
        names(&plan["changed"]).contains(&"workers".to_owned()),
        "{plan:#}"
    );
    assert_eq!(
        (workers(&r), etag(&r)),
        (pids.clone(), tag.clone()),
        "unchanged"
    );
    let restart = names(&plan["workers"]["restart"]);
    let start = names(&plan["workers"]["start"]);

    // The same change for real does what the dry run said.
    let real = r.http("PATCH", "/v1/config", ops).expect("PATCH");
    assert_eq!(real.status, 200, "{}", real.text());
    assert_eq!(
        real.header("etag"),
        plan["etag"].as_str(),
        "the predicted ETag"
    );
    did_as_predicted(&pids, &workers(&r), &restart, &start);

    // A local-data change: predicted as a rules reset, and done as one.
    let ops =
        br#"[{"op": "replace", "path": "/local-data/addresses/dry.test", "value": "192.0.2.101"}]"#;
    let plan = json(
        &r.http("PATCH", "/v1/config?dry-run=true", ops)
            .expect("PATCH"),
    );
    assert_eq!(plan["workers"]["action"], "rules-reset", "{plan:#}");
    assert!(answers(&r, "192.0.2.100"), "the dry run changed no rule");
    let before = workers(&r);
    let real = r.http("PATCH", "/v1/config", ops).expect("PATCH");
    assert_eq!(real.status, 200, "{}", real.text());
    assert!(answers(&r, "192.0.2.101"));
    assert_eq!(workers(&r), before, "no worker restarted");

    // A configuration kresd cannot run: the dry run's canary refuses it, nothing changes.
    let (pids, tag) = (workers(&r), etag(&r));
    let ops = br#"[{"op": "add", "path": "/lua", "value": {"script": "os.exit(1)"}}]"#;
    let refused = r
        .http("PATCH", "/v1/config?dry-run=true", ops)
        .expect("PATCH");
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert!(refused.text().contains("canary"), "{}", refused.text());
    assert_eq!((workers(&r), etag(&r)), (pids, tag), "unchanged");
    r.stop();
}

/// Run our kresctl; its exit code, standard output and standard error.
fn kresctl(r: &Resolver, args: &[&str]) -> (Option<i32>, String, String) {
    let out = r.kresctl(args).expect("kresctl");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn kresctl_config_diff_and_apply_dry_run_predict_what_apply_does() {
    let setup = Setup::new("config-diff").workers(2).extra(RECORDS);
    let r = common::start(&setup).expect("start");
    let (pids, tag) = (workers(&r), etag(&r));
    let mut wanted = json(&r.http("GET", "/v1/config", b"").expect("GET"));
    wanted["workers"] = Value::from(3);
    wanted["local-data"]["addresses"]["dry.test"] = Value::from("192.0.2.102");
    let file = std::env::temp_dir().join(format!("kres-config-diff-{}.json", std::process::id()));
    std::fs::write(&file, serde_json::to_vec(&wanted).expect("JSON")).expect("write");
    let file_arg = file.to_str().expect("a UTF-8 path");

    let (code, out, err) = kresctl(&r, &["config", "diff", file_arg]);
    assert_eq!(
        code,
        Some(1),
        "differences, as diff(1) says them: {out}{err}"
    );
    assert!(err.is_empty(), "{err}");
    assert!(out.contains("~ /workers: 2 -> 3"), "{out}");
    assert!(
        out.contains(r#"~ /local-data/addresses/dry.test: "192.0.2.100" -> "192.0.2.102""#),
        "{out}"
    );
    assert!(out.contains("sections changed: "), "{out}");

    let (code, out, err) = kresctl(&r, &["apply", "--dry-run", "--json", file_arg]);
    assert_eq!(code, Some(0), "{out}{err}");
    let predicted: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(
        predicted["differences"].as_array().map(Vec::len),
        Some(2),
        "{predicted:#}"
    );
    let plan = &predicted["plan"];
    assert_eq!(plan["workers"]["action"], "restart", "{plan:#}");
    assert_eq!(
        (workers(&r), etag(&r)),
        (pids.clone(), tag),
        "a diff changes nothing"
    );
    assert!(answers(&r, "192.0.2.100"), "the rules are unchanged");

    let (code, out, err) = kresctl(&r, &["apply", file_arg]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.starts_with(
            "changed workers, local-data; workers restarted kresd0,kresd1 started \
                         kresd2"
        ),
        "what the resolver did: {out}"
    );
    assert_eq!(
        Some(etag(&r).as_str()),
        plan["etag"].as_str(),
        "the predicted ETag"
    );
    did_as_predicted(
        &pids,
        &workers(&r),
        &names(&plan["workers"]["restart"]),
        &names(&plan["workers"]["start"]),
    );
    assert!(answers(&r, "192.0.2.102"));
    let (code, out, _) = kresctl(&r, &["config", "diff", file_arg]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("no differences"), "{out}");

    // A file the resolver would refuse: the error names the path, nothing changes.
    wanted["workers"] = Value::from("many");
    std::fs::write(&file, serde_json::to_vec(&wanted).expect("JSON")).expect("write");
    let tag = etag(&r);
    let (code, out, err) = kresctl(&r, &["config", "diff", file_arg]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(err.contains("/workers"), "{err}");
    assert_eq!(etag(&r), tag);
    let _ = std::fs::remove_file(&file);
    r.stop();
}
