//! Settings kresd cannot change in place, changed at run time on real kresd. kresd sizes files
//! its workers share by some settings (`cache/top` by `cache.size-max`, `ratelimiting` by
//! `rate-limiting`, `defer` by `defer` and `workers`) and refuses to start beside a worker that
//! holds one sized otherwise; a change of such a setting applies by a rolling restart on a new
//! file, as upstream's manager does. Every such change here goes through kresctl while the
//! resolver keeps answering, and no kresd ever meets a file sized for another configuration.

mod common;

use std::time::Instant;

use common::{Resolver, Setup, START_TIMEOUT};
use serde_json::Value;

const RECORDS: &str = "local-data:\n  records: |\n    c.test. 300 A 192.0.2.20\n";

/// What kresd says when it meets a shared file sized for another configuration.
const SIZED_OTHERWISE: &str = "with different configuration";

/// Run our kresctl; its standard output, or a panic with everything it said.
fn kresctl_ok(r: &Resolver, args: &[&str]) -> String {
    let out = r.kresctl(args).expect("kresctl runs");
    assert!(
        out.status.success(),
        "kresctl {args:?}: exit {:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The shared files the processes named `comm` map, as (pid, path) with the kernel's
/// ` (deleted)` mark on a file removed since.
fn mapped_shared_files(r: &Resolver, comm: &str, name: &str) -> Vec<(i32, String)> {
    let mut found = Vec::new();
    for p in r.children_named(comm) {
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", p.pid)).unwrap_or_default();
        let mut paths: Vec<String> = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5).map(|_| l))
            .filter_map(|l| l.find('/').map(|at| l[at..].to_owned()))
            .filter(|path| path.trim_end_matches(" (deleted)").ends_with(name))
            .collect();
        paths.dedup();
        found.extend(paths.into_iter().map(|path| (p.pid, path)));
    }
    found
}

#[test]
fn settings_that_size_shared_files_change_while_serving() {
    let r = common::start(&Setup::new("sized-changes").workers(2).extra(RECORDS)).expect("start");
    std::fs::create_dir_all(r.dir.host("cache2")).expect("second storage");
    let cache2 = r.dir.bed("cache2").display().to_string();
    let second_port = testbed::free_port().expect("a port");
    let listen = format!("127.0.0.1@{}", r.port);
    let two_listens =
        format!(r#"[{{"interface": "{listen}"}}, {{"interface": "127.0.0.1@{second_port}"}}]"#);
    let one_listen = format!(r#"[{{"interface": "{listen}"}}]"#);
    // Sizes whose cache `top` differs (kresd sizes it by powers of two of size-max/128).
    let changes: Vec<(&str, &str)> = vec![
        ("/cache/size-max", "100M"),
        ("/cache/size-max", "5M"),
        ("/cache/storage", &cache2),
        ("/cache/size-max", "30M"),
        ("/network/listen", &two_listens),
        ("/network/listen", &one_listen),
        ("/workers", "3"),
        ("/workers", "1"),
        ("/rate-limiting", r#"{"enable": true, "rate-limit": 100}"#),
        ("/rate-limiting/rate-limit", "200"),
        ("/defer", r#"{"log-period": "5s"}"#),
        ("/defer/enable", "false"),
        ("/defer/enable", "true"),
        ("/workers", "2"),
        ("/rate-limiting/enable", "false"),
        ("/cache/size-max", "60M"),
    ];
    for (pointer, value) in changes {
        let before = r.pids_named("kresd");
        let started = Instant::now();
        let said = kresctl_ok(&r, &["config", "set", "-p", pointer, value]);
        println!(
            "{pointer} = {value}: {:?} ({})",
            started.elapsed(),
            said.trim()
        );
        assert_eq!(
            r.a_records("c.test."),
            vec!["192.0.2.20"],
            "after {pointer}"
        );
        let after = r.pids_named("kresd");
        assert!(
            after.iter().all(|p| !before.contains(p)),
            "{pointer}: every worker replaced: {before:?} -> {after:?}"
        );
        let set: Value =
            serde_json::from_str(&kresctl_ok(&r, &["config", "get", "--json", "-p", pointer]))
                .expect("JSON");
        let wanted: Value = serde_json::from_str(value).unwrap_or(Value::from(value));
        assert_eq!(set, wanted, "{pointer} as set");
    }
    // A file edit and `kresctl reload` (systemd's ExecReload) take a new size too.
    let config = std::fs::read_to_string(&r.config).expect("read config");
    std::fs::write(&r.config, config.replace("size-max: 10M", "size-max: 40M")).expect("write");
    let started = Instant::now();
    kresctl_ok(&r, &["reload"]);
    println!("reload to size-max 40M: {:?}", started.elapsed());
    assert_eq!(r.a_records("c.test."), vec!["192.0.2.20"]);
    let size = kresctl_ok(&r, &["config", "get", "--json", "-p", "/cache/size-max"]);
    assert_eq!(size.trim(), "\"40M\"");

    // Every worker and the cache GC hold the one `top` the storage has now: none is left on a
    // removed one, and no kresd met a file sized otherwise.
    let storage = r.dir.host("cache");
    let held = testbed::wait_for("the GC opens the cache", START_TIMEOUT, || {
        let held = mapped_shared_files(&r, "kres-cache-gc", "/top");
        Ok((!held.is_empty()).then_some(held))
    })
    .expect("the GC holds the cache's top");
    let mut held: Vec<(i32, String)> = held;
    held.extend(mapped_shared_files(&r, "kresd", "/top"));
    for (pid, path) in &held {
        assert!(
            !path.ends_with("(deleted)") && path.ends_with(&format!("{}/top", storage.display())),
            "{pid} holds {path}"
        );
    }
    let log = r.launched.output.text();
    assert!(!log.contains(SIZED_OTHERWISE), "{log}");
    r.stop();
}

/// One change of every section the manager can change at run time, each on real kresd
/// beside the running workers (a canary, then the roll, a live change or a rules reset):
/// none is refused, and the resolver keeps answering. A section whose change kresd cannot
/// take beside running workers (as `cache.size-max` once) fails here.
#[test]
fn every_section_changes_at_run_time() {
    let r = common::start(&Setup::new("every-section").workers(2).extra(RECORDS)).expect("start");
    let changes: Vec<(&str, Value)> = vec![
        ("/nsid", serde_json::json!("every-section")),
        ("/hostname", serde_json::json!("every-section.test")),
        ("/workers", serde_json::json!(3)),
        (
            "/options",
            serde_json::json!({"minimize": false, "glue-checking": "strict"}),
        ),
        ("/network/tcp-pipeline", serde_json::json!(50)),
        (
            "/network/edns-buffer-size",
            serde_json::json!({"upstream": "1200B", "downstream": "1200B"}),
        ),
        (
            "/views",
            serde_json::json!([{"subnets": ["10.0.0.0/8"], "answer": "refused"}]),
        ),
        ("/local-data/ttl", serde_json::json!("1m")),
        (
            "/forward",
            serde_json::json!([{"subtree": "example.", "servers": ["127.0.0.1"]}]),
        ),
        (
            "/fallback",
            serde_json::json!({"enable": true, "servers": ["127.0.0.1"]}),
        ),
        ("/cache/prefetch", serde_json::json!({"expiring": true})),
        ("/cache/ttl-min", serde_json::json!("10s")),
        ("/cache/size-max", serde_json::json!("20M")),
        ("/dnssec", serde_json::json!({"log-bogus": true})),
        ("/dns64", serde_json::json!({"enable": true})),
        ("/logging/level", serde_json::json!("info")),
        ("/monitoring", serde_json::json!({"metrics": "always"})),
        (
            "/rate-limiting",
            serde_json::json!({"enable": true, "rate-limit": 1000}),
        ),
        ("/defer", serde_json::json!({"enable": false})),
        ("/lua", serde_json::json!({"script": "-- nothing"})),
        ("/workers", serde_json::json!(2)),
    ];
    for (pointer, value) in changes {
        let resp = r.put_json(pointer, value.clone());
        assert_eq!(resp.status, 200, "{pointer} = {value}: {}", resp.text());
        assert_eq!(
            r.a_records("c.test."),
            vec!["192.0.2.20"],
            "after {pointer}"
        );
    }
    let log = r.launched.output.text();
    assert!(!log.contains(SIZED_OTHERWISE), "{log}");
    r.stop();
}
