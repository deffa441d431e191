//! Live `logging` changes on real kresd: a change of level, target or groups reaches the
//! running workers through their control sockets, with no worker restarted and no query of a
//! load lost; kresd's own `log_level()` and `log_groups()` answer the new values and a query
//! is logged at debug. The dry run and `/events` call it a live change. A worker whose
//! control socket is gone is restarted instead, on the same level; a worker killed later comes
//! back on it; a change that also touches a section the workers cannot take live still
//! restarts every worker. The manager process follows the level as well. Times of live
//! changes and of rolling restarts are reported.

mod common;

use std::time::{Duration, Instant};

use common::{Resolver, Setup, START_TIMEOUT};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use testbed::http::EventStream;
use testbed::load::{Load, LoadSpec};

const RECORDS: &str = "local-data:\n  addresses:\n    load.live.test: 192.0.2.60\n    notice.live.test: 192.0.2.61\n    debug.live.test: 192.0.2.62\n";

/// How many times each kind of change is timed.
const RUNS: usize = 5;

/// What `expr` evaluates to in worker `id`, through its control socket.
fn control(r: &Resolver, id: u32, expr: &str) -> Value {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let path = r.dir.host(&format!("run/control/{id}"));
    runtime
        .block_on(kres_daemon::control::command(
            &path,
            expr,
            Duration::from_secs(10),
        ))
        .unwrap_or_else(|e| panic!("worker {id}: {e}"))
}

/// `log_level()` and `log_groups()` of every worker of `ids`.
fn logging_of(r: &Resolver, ids: &[u32]) -> Vec<(Value, Value)> {
    ids.iter()
        .map(|&id| {
            (
                control(r, id, "log_level()"),
                control(r, id, "log_groups()"),
            )
        })
        .collect()
}

/// The kresd workers' pids by name, from `/processes`.
fn workers(r: &Resolver) -> Vec<(String, i64)> {
    workers_running(r)
        .into_iter()
        .map(|(n, p, _)| (n, p))
        .collect()
}

/// The kresd workers' names, pids and whether they run, from `/processes`.
fn workers_running(r: &Resolver) -> Vec<(String, i64, bool)> {
    let response = r.http("GET", "/processes/kresd", b"").expect("GET");
    let table: Value = serde_json::from_slice(&response.body).expect("JSON");
    let mut v: Vec<(String, i64, bool)> = table
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|p| {
            Some((
                p["name"].as_str()?.to_owned(),
                p["pid"].as_i64()?,
                p["state"] == "running",
            ))
        })
        .collect();
    v.sort();
    v
}

/// The pid of cache-gc, from `/processes`.
fn gc_pid(r: &Resolver) -> Option<i64> {
    let response = r.http("GET", "/processes", b"").expect("GET");
    let table: Value = serde_json::from_slice(&response.body).expect("JSON");
    table
        .as_array()
        .expect("a list")
        .iter()
        .find(|p| p["name"] == "cache-gc")
        .and_then(|p| p["pid"].as_i64())
}

/// Apply `body` at `/v1/config{pointer}` (PUT); the time the API took to answer.
fn put(r: &Resolver, pointer: &str, body: Value) -> Duration {
    let began = Instant::now();
    let response = r.put_json(pointer, body);
    let took = began.elapsed();
    assert_eq!(response.status, 200, "{}", response.text());
    took
}

/// The next `config-applied` event's data.
fn applied(stream: &mut EventStream) -> Value {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = stream
            .next(left)
            .expect("an event")
            .expect("the stream goes on");
        if message.event.as_deref() == Some("config-applied") {
            return serde_json::from_str(&message.data).expect("JSON");
        }
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

#[test]
fn logging_changes_reach_running_workers_live_under_load() {
    let r = common::start(&Setup::new("live-logging").workers(2).extra(RECORDS)).expect("start");
    let pids = workers(&r);
    assert_eq!(pids.len(), 2, "{pids:?}");
    let gc = gc_pid(&r).expect("the cache GC runs");
    assert_eq!(
        logging_of(&r, &[0, 1]),
        vec![(json!("notice"), json!({})); 2]
    );
    // At notice, a query is not logged.
    assert_eq!(r.a_records("notice.live.test."), vec!["192.0.2.61"]);

    // The dry run predicts a live change to both workers; debug makes the GC verbose, so it
    // alone is replaced.
    let dry = r
        .http(
            "PUT",
            "/v1/config/logging/level?dry-run=true",
            br#""debug""#,
        )
        .expect("PUT");
    assert_eq!(dry.status, 200, "{}", dry.text());
    let plan: Value = serde_json::from_slice(&dry.body).expect("JSON");
    assert_eq!(plan["changed"], json!(["logging"]), "{plan:#}");
    assert_eq!(
        plan["workers"],
        json!({"action": "live", "workers": ["kresd0", "kresd1"], "rules-reset": false}),
        "{plan:#}"
    );
    assert_eq!(plan["cache-gc"], "replace", "{plan:#}");

    let mut events = EventStream::open(&r.api, "/events", &[]).expect("GET /events");
    let load = Load::start(LoadSpec::new(r.dns(), 2000, "load.live.test.")).expect("load");
    assert!(
        load.wait_answers(500, START_TIMEOUT),
        "the load is answered"
    );

    let mut live = vec![put(&r, "/logging/level", json!("debug"))];
    assert_eq!(workers(&r), pids, "no worker restarted");
    assert_eq!(
        logging_of(&r, &[0, 1]),
        vec![(json!("debug"), json!({})); 2]
    );
    let event = applied(&mut events);
    assert_eq!(event["changed"], json!(["logging"]), "{event:#}");
    assert_eq!(
        event["workers"],
        json!({"action": "live", "workers": ["kresd0", "kresd1"], "restarted": [], "rules-reset": false}),
        "{event:#}"
    );
    assert_eq!(event["cache-gc"], "replace", "{event:#}");
    let new_gc = gc_pid(&r).expect("the cache GC runs again");
    assert_ne!(new_gc, gc, "the GC was replaced (it runs with -v now)");
    // kresd logs a query at debug now; the one asked at notice was not.
    assert_eq!(r.a_records("debug.live.test."), vec!["192.0.2.62"]);
    r.launched
        .output
        .wait_for("'debug.live.test.'", START_TIMEOUT)
        .expect("a query logged at debug");
    assert_eq!(r.launched.output.count("'notice.live.test.'"), 0);
    // The manager process follows the level too: it logs at debug now.
    r.launched
        .output
        .wait_for(
            "the manager's logging follows the configuration",
            START_TIMEOUT,
        )
        .expect("the manager logs at debug");

    // Groups (the kresd group means debug for the workers; the manager's group is not
    // kresd's), then back to notice with no groups: the groups are cleared.
    live.push(put(
        &r,
        "/logging",
        json!({"level": "notice", "groups": ["cache", "io", "manager"]}),
    ));
    assert_eq!(
        logging_of(&r, &[0, 1]),
        vec![(json!("notice"), json!(["cache", "io"])); 2]
    );
    let quiet_gc = gc_pid(&r).expect("the cache GC runs");
    assert_ne!(quiet_gc, new_gc, "the GC was replaced (without -v again)");
    live.push(put(&r, "/logging", json!({"level": "notice"})));
    assert_eq!(
        logging_of(&r, &[0, 1]),
        vec![(json!("notice"), json!({})); 2]
    );
    assert_eq!(gc_pid(&r), Some(quiet_gc), "the GC's -v did not change");
    for _ in 0..2 {
        assert_eq!(applied(&mut events)["workers"]["action"], "live");
    }
    for i in 0..RUNS {
        let level = if i % 2 == 0 { "info" } else { "notice" };
        live.push(put(&r, "/logging/level", json!(level)));
        assert_eq!(control(&r, (i % 2) as u32, "log_level()"), level);
        assert_eq!(applied(&mut events)["workers"]["action"], "live");
    }
    let answered = load.answered();
    assert!(
        load.wait_answers(answered + 500, START_TIMEOUT),
        "answered after the changes"
    );
    let report = load.stop();
    eprintln!("live logging changes under load: {report}");
    assert_eq!(report.lost, 0, "{report}");
    assert_eq!(report.send_failures, 0, "{report}");
    assert_eq!(workers(&r), pids, "no worker restarted by any live change");

    // The same logging change with a section the workers cannot take live: a rolling restart
    // of every worker, as before.
    let mut rolls = Vec::new();
    for i in 0..RUNS {
        let (level, minimize) = if i % 2 == 0 {
            ("info", false)
        } else {
            ("notice", true)
        };
        let before = workers(&r);
        let began = Instant::now();
        let response = r
            .http(
                "PATCH",
                "/v1/config",
                json!([
                    {"op": "add", "path": "/logging/level", "value": level},
                    {"op": "add", "path": "/options", "value": {"minimize": minimize}},
                ])
                .to_string()
                .as_bytes(),
            )
            .expect("PATCH");
        rolls.push(began.elapsed());
        assert_eq!(response.status, 200, "{}", response.text());
        let after = workers(&r);
        assert_eq!(after.len(), 2);
        assert!(
            after.iter().zip(&before).all(|(a, b)| a.1 != b.1),
            "every worker restarted: {before:?} -> {after:?}"
        );
        let event = applied(&mut events);
        assert_eq!(event["workers"]["action"], "restart", "{event:#}");
        assert_eq!(logging_of(&r, &[0, 1]), vec![(json!(level), json!({})); 2]);
    }
    eprintln!(
        "logging change, 2 workers: live {:.1?} (median of {}), with a rolling restart {:.1?} (median of {RUNS}); all live: {live:.1?}",
        median(live.clone()),
        live.len(),
        median(rolls.clone()),
    );
    r.stop();
}

#[test]
fn a_worker_that_cannot_take_it_live_is_restarted_on_the_new_level() {
    let r = common::start(&Setup::new("live-fallback").workers(2).extra(RECORDS)).expect("start");
    let before = workers(&r);
    let mut events = EventStream::open(&r.api, "/events", &[]).expect("GET /events");
    // Worker 1 can no longer be reached on its control socket.
    std::fs::remove_file(r.dir.host("run/control/1")).expect("remove control/1");

    put(&r, "/logging/level", json!("info"));
    let after = workers(&r);
    assert_eq!(
        after.len(),
        2,
        "{}\n{}",
        r.http("GET", "/processes", b"").expect("GET").text(),
        r.launched.output.text()
    );
    assert_eq!(after[0], before[0], "kresd0 took it live");
    assert_eq!(after[1].0, "kresd1");
    assert_ne!(after[1].1, before[1].1, "kresd1 was restarted instead");
    let event = applied(&mut events);
    assert_eq!(
        event["workers"],
        json!({"action": "live", "workers": ["kresd0", "kresd1"], "restarted": ["kresd1"], "rules-reset": false}),
        "{event:#}"
    );
    assert!(
        r.launched
            .output
            .text()
            .contains("did not take the logging change live"),
        "the fallback is logged"
    );
    // Never a mix: both on the new level.
    assert_eq!(logging_of(&r, &[0, 1]), vec![(json!("info"), json!({})); 2]);

    // A worker killed after a live change comes back on the new level (its file was written).
    put(&r, "/logging/level", json!("warning"));
    let live = workers(&r);
    assert_eq!(live, after, "no restart this time");
    kill(Pid::from_raw(live[0].1 as i32), Signal::SIGKILL).expect("SIGKILL");
    let replaced = testbed::wait_for("kresd0 replaced and running", START_TIMEOUT, || {
        let back = workers_running(&r)
            .iter()
            .any(|(name, pid, running)| name == "kresd0" && *pid != live[0].1 && *running);
        Ok(back.then(|| workers(&r)))
    })
    .expect("kresd0 comes back");
    assert_eq!(replaced[1], live[1]);
    assert_eq!(
        logging_of(&r, &[0, 1]),
        vec![(json!("warning"), json!({})); 2]
    );
    r.stop();
}

/// The level word of a log line of the daemon (`WARN`, `ERROR`, `INFO`…).
fn level_of(line: &str) -> Option<&str> {
    line.split_whitespace()
        .find(|w| ["ERROR", "WARN", "INFO", "DEBUG", "TRACE"].contains(w))
}

#[test]
fn kresd_warnings_and_errors_are_logged_at_their_level() {
    // Under a hard limit on descriptors below what kresd recommends, it warns as it starts.
    let r = common::start(
        &Setup::new("child-levels")
            .open_files(4096, 4096)
            .logging("  level: info\n"),
    )
    .expect("start");
    let warning = r
        .launched
        .output
        .wait_for("hard limit for number of file-descriptors", START_TIMEOUT)
        .expect("kresd warns of the descriptor limit");
    assert_eq!(level_of(&warning), Some("WARN"), "{warning}");
    // Records the policy-loader cannot read: kresd's error is logged as an error.
    let response = r.put_json(
        "/local-data",
        json!({"records": "this is not a zone file ((\n"}),
    );
    assert_ne!(response.status, 200, "{}", response.text());
    let error = r
        .launched
        .output
        .wait_for("error parsing zone file", START_TIMEOUT)
        .expect("kresd's error");
    assert_eq!(level_of(&error), Some("ERROR"), "{error}");
    // kresd's other lines on its standard output stay information.
    let text = r.launched.output.text();
    let ordinary: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" child: ") && l.contains("stream=\"stdout\""))
        .filter(|l| !l.contains("warning") && !l.contains("error"))
        .collect();
    assert!(
        ordinary.iter().all(|l| level_of(l) == Some("INFO")),
        "{ordinary:#?}"
    );
    r.stop();
}
