//! Never a mix, on real kresd under load: a change whose canary and first worker start but
//! whose second worker does not (a Lua script that fails from its third run on) is rolled
//! back; every worker ends on the running configuration, the API and `/events` say so, and no
//! query of the load is lost. So is one that also resizes the cache, whose shared `top` the
//! workers already replaced hold sized anew: going back makes it anew again.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use common::{config_yaml, Setup, START_TIMEOUT};
use testbed::load::{Load, LoadSpec};

const RECORDS: &str = "local-data:\n  addresses:\n    mix.test: 192.0.2.90\n";

/// What `expr` evaluates to in the worker behind control socket `path` (JSON text).
fn eval(path: &std::path::Path, expr: &str) -> String {
    let mut s = UnixStream::connect(path).expect("control socket");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut prompt = [0u8; 2];
    s.read_exact(&mut prompt).expect("prompt");
    s.write_all(format!("__json\n{expr}\n").as_bytes())
        .expect("send");
    let mut len = [0u8; 4];
    s.read_exact(&mut len).expect("length");
    let mut reply = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut reply).expect("reply");
    String::from_utf8_lossy(&reply).into_owned()
}

#[test]
fn a_worker_that_does_not_come_back_rolls_the_change_back() {
    roll_back_under_load("never-a-mix", "10M");
}

#[test]
fn a_cache_resize_that_does_not_come_back_rolls_back_onto_the_old_size() {
    roll_back_under_load("never-a-mix-resize", "100M");
}

/// A change (to `size_max` too) whose second worker does not start, under load.
fn roll_back_under_load(name: &'static str, size_max: &str) {
    let setup = Setup::new(name).workers(2).extra(RECORDS);
    let r = common::start(&setup).expect("start");
    let (counter_host, counter_bed) = r.dir.join("starts");
    // Counts the kresd starts with the new configuration: the canary (1) and the first
    // worker (2) run, the second worker (3 and later) does not.
    let script = format!(
        "local p = '{path}'\n\
         local f = io.open(p, 'r')\n\
         local n = f and tonumber(f:read('*a')) or 0\n\
         if f then f:close() end\n\
         n = n + 1\n\
         f = io.open(p, 'w'); f:write(tostring(n)); f:close()\n\
         if n >= 3 then os.exit(1) end\n\
         mix_marker = 'new'\n",
        path = counter_bed.display()
    );
    let indented: String = script.lines().map(|l| format!("    {l}\n")).collect();
    let tried = Setup::new(name)
        .workers(2)
        .extra(&format!("{RECORDS}lua:\n  script: |\n{indented}"));
    let yaml = config_yaml(&r.dir, r.port, &tried)
        .replace("size-max: 10M", &format!("size-max: {size_max}"));
    let body = kres_config::parse_document(&yaml, std::path::Path::new("tried.yaml"))
        .expect("the tried configuration parses")
        .to_string();

    let mut events = testbed::http::EventStream::open(&r.api, "/events", &[]).expect("events");
    let load = Load::start(LoadSpec::new(r.dns(), 2000, "mix.test.")).expect("load");
    assert!(
        load.wait_answers(200, START_TIMEOUT),
        "the load is answered"
    );
    let answer = r.http("PUT", "/v1/config", body.as_bytes()).expect("PUT");
    let settle = load.answered() + 500;
    assert!(load.wait_answers(settle, START_TIMEOUT), "answered after");
    let report = load.stop();

    assert_eq!(answer.status, 400, "{}", answer.text());
    assert!(
        answer
            .text()
            .contains("every worker was brought back to the running configuration"),
        "{}",
        answer.text()
    );
    let starts: u32 = std::fs::read_to_string(&counter_host)
        .expect("counter")
        .trim()
        .parse()
        .expect("a number");
    assert!(
        starts >= 3,
        "the second worker ran the new script: {starts}"
    );
    // Every worker runs the running configuration: none has the new script's marker.
    for n in 0..2 {
        let control = r.dir.host(&format!("run/control/{n}"));
        let marker = eval(&control, "mix_marker");
        assert!(
            !marker.contains("new"),
            "worker {n} runs the new configuration"
        );
    }
    // Followers of /events learnt the change was rolled back, and why.
    let rolled_back = loop {
        let message = events
            .next(START_TIMEOUT)
            .expect("an event")
            .expect("not ended");
        let data: serde_json::Value = serde_json::from_str(&message.data).expect("JSON");
        assert_ne!(data["kind"], "config-applied", "{data}");
        if data["kind"] == "config-rolled-back" {
            break data;
        }
    };
    assert_eq!(rolled_back["recovered"], true, "{rolled_back}");
    assert_eq!(rolled_back["cause"], "api", "{rolled_back}");
    assert!(
        rolled_back["reason"]
            .as_str()
            .is_some_and(|r| r.contains("kresd1")),
        "{rolled_back}"
    );
    let config = r.http("GET", "/v1/config", b"").expect("GET");
    assert!(!config.text().contains("mix_marker"), "{}", config.text());
    assert_eq!(r.pids_named("kresd").len(), 2);
    assert_eq!(report.lost, 0, "queries lost: {report:?}");
    eprintln!(
        "rolled back under load: {} queries, {} lost, max latency {:?}",
        report.sent, report.lost, report.max_latency
    );
    r.stop();
}
