//! `GET /events` on real kresd: a follower sees a worker killed and restarted, a change
//! applied and one refused with its reason; a client that disconnected resumes with
//! `Last-Event-ID` and gets exactly the events after it; after the manager process crashed, a
//! resume from an id of the old one is told it missed events. `kresctl events` and `kresctl
//! processes --watch` print the events and end cleanly when the resolver stops; against
//! upstream's manager `kresctl events` says the route is missing. Steps are ordered by waiting
//! on the stream's events, never by sleeping.

mod common;

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Setup, KRESCTL, START_TIMEOUT};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use testbed::http::{EventStream, SseMessage};

/// Bound for one awaited event (a roll with a canary on a loaded 2-core machine included).
const WAIT: Duration = Duration::from_secs(60);

/// Read `stream` until a message of kind `kind` whose data satisfies `pred`; every message
/// read on the way is appended to `seen`.
fn wait_for(
    stream: &mut EventStream,
    seen: &mut Vec<SseMessage>,
    kind: &str,
    pred: impl Fn(&Value) -> bool,
) -> (SseMessage, Value) {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = stream
            .next(left)
            .unwrap_or_else(|e| panic!("waiting for {kind}: {e:#}; seen: {seen:#?}"))
            .unwrap_or_else(|| panic!("the stream ended while waiting for {kind}: {seen:#?}"));
        seen.push(message.clone());
        let data: Value = serde_json::from_str(&message.data).expect("JSON data");
        assert_eq!(
            message.event.as_deref(),
            data["kind"].as_str(),
            "event: and kind agree"
        );
        if message.event.as_deref() == Some(kind) && pred(&data) {
            return (message, data);
        }
    }
}

/// The seq of an id `<epoch>-<seq>`.
fn seq(id: &str) -> u64 {
    id.rsplit_once('-')
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or_else(|| panic!("not an event id: {id}"))
}

fn kill_worker(r: &common::Resolver) -> i32 {
    let pids = r.pids_named("kresd");
    assert_eq!(pids.len(), 1, "{pids:?}");
    kill(Pid::from_raw(pids[0]), Signal::SIGKILL).expect("SIGKILL");
    pids[0]
}

/// Wait until the worker killed as `old` exited by SIGKILL and was replaced and ready; the
/// new pid.
fn wait_replaced(stream: &mut EventStream, seen: &mut Vec<SseMessage>, old: i32) -> i32 {
    let (_, exited) = wait_for(stream, seen, "process-exited", |d| {
        d["name"] == "kresd0" && d["pid"] == old
    });
    assert_eq!(exited["status"]["signaled"]["signal"], 9, "{exited}");
    let (_, restarted) = wait_for(stream, seen, "process-restarted", |d| d["name"] == "kresd0");
    let new = restarted["pid"].as_i64().expect("pid") as i32;
    assert_ne!(new, old);
    wait_for(stream, seen, "process-ready", |d| {
        d["name"] == "kresd0" && d["pid"] == new
    });
    new
}

#[test]
fn a_follower_sees_crashes_and_changes_and_resumes_exactly_after_its_last_id() {
    let r = common::start(
        &Setup::new("events")
            .extra("local-data:\n  addresses:\n    one.events.test: 192.0.2.1\n")
            .env(kres_daemon::daemon::FAULT_INJECTION_VAR, "1"),
    )
    .expect("start");
    let mut first = EventStream::open(&r.api, "/events", &[]).expect("GET /events");
    assert_eq!(first.status, 200);
    assert_eq!(first.header("content-type"), Some("text/event-stream"));
    let mut seen = Vec::new();

    // A worker killed: exited by SIGKILL, restarted with a new pid, ready.
    let old = kill_worker(&r);
    let new = wait_replaced(&mut first, &mut seen, old);
    assert_eq!(r.pids_named("kresd"), vec![new]);

    // A change applied: what the plan did.
    let resp = r.put_json(
        "/local-data",
        json!({"addresses": {"two.events.test": "192.0.2.2"}}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let (_, applied) = wait_for(&mut first, &mut seen, "config-applied", |_| true);
    assert_eq!(applied["cause"], "api");
    assert_eq!(applied["changed"], json!(["local-data"]));
    assert_eq!(applied["workers"]["action"], "rules-reset");

    // A change refused by the canary, with its reason.
    let resp = r.put_json(
        "/lua",
        json!({"script": "error('the events stream must carry this')"}),
    );
    assert_eq!(resp.status, 400, "{}", resp.text());
    let (refused, data) = wait_for(&mut first, &mut seen, "config-refused", |_| true);
    assert_eq!(data["cause"], "api");
    let reason = data["reason"].as_str().expect("a reason");
    assert!(
        reason.contains("canary") && reason.contains("the events stream must carry this"),
        "{reason}"
    );
    let last = refused.id.clone().expect("an id");
    let ids: Vec<u64> = seen
        .iter()
        .filter_map(|m| m.id.as_deref())
        .map(seq)
        .collect();
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "{ids:?}");
    drop(first);

    // A follower that stays, resuming from the same id, witnesses what happens meanwhile.
    let header = [("Last-Event-ID", last.as_str())];
    let mut witness = EventStream::open(&r.api, "/events", &header).expect("GET /events");
    let mut witnessed = Vec::new();
    let resp = r.put_json(
        "/local-data",
        json!({"addresses": {"three.events.test": "192.0.2.3"}}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    wait_for(&mut witness, &mut witnessed, "config-applied", |d| {
        d["cause"] == "api"
    });
    let out = r.kresctl(&["reload"]).expect("kresctl reload");
    assert!(out.status.success(), "{out:?}");
    wait_for(&mut witness, &mut witnessed, "config-reloading", |d| {
        d["origin"] == "api"
    });
    wait_for(&mut witness, &mut witnessed, "config-applied", |d| {
        d["cause"] == "reload" && d["changed"] == json!(["local-data"])
    });
    r.launched.signal(Signal::SIGHUP).expect("SIGHUP");
    wait_for(&mut witness, &mut witnessed, "config-reloading", |d| {
        d["origin"] == "signal"
    });
    wait_for(&mut witness, &mut witnessed, "config-applied", |d| {
        d["cause"] == "reload" && d["changed"] == json!([])
    });
    let old = kill_worker(&r);
    wait_replaced(&mut witness, &mut witnessed, old);
    let witnessed_last = witnessed
        .iter()
        .rev()
        .find_map(|m| m.id.clone())
        .expect("an id");

    // The client that left resumes: exactly the events after its id, none twice, none missing.
    let mut resumed = EventStream::open(&r.api, "/events", &header).expect("GET /events");
    let mut replayed = Vec::new();
    while replayed
        .last()
        .is_none_or(|m: &SseMessage| m.id.as_deref() != Some(witnessed_last.as_str()))
    {
        let message = resumed.next(WAIT).expect("replay").expect("not ended");
        replayed.push(message);
    }
    assert_eq!(replayed, witnessed);
    let ids: Vec<u64> = replayed
        .iter()
        .map(|m| seq(m.id.as_deref().expect("id")))
        .collect();
    let want: Vec<u64> = (seq(&last) + 1..=seq(&witnessed_last)).collect();
    assert_eq!(ids, want);
    eprintln!(
        "resumed after {last}: {} events replayed, ids {}..={}",
        ids.len(),
        want[0],
        seq(&witnessed_last)
    );

    // An id of another manager (or a resolver run before): told first that events were missed.
    let mut stranger =
        EventStream::open(&r.api, "/events", &[("Last-Event-ID", "1.0-1")]).expect("open");
    let notice = stranger.next(WAIT).expect("a notice").expect("not ended");
    assert_eq!(notice.event.as_deref(), Some("events-missed"), "{notice:?}");
    assert_eq!(notice.id, None);
    drop(stranger);

    // The manager process crashes and is replaced: the ids of the new one say so, and a
    // client resuming from an id of the old one is told it missed events.
    let _ = r.http("POST", "/debug/crash-manager/abort", b"");
    r.launched
        .output
        .wait_for("serving the API again", START_TIMEOUT)
        .expect("a new manager process");
    let mut after_crash =
        EventStream::open(&r.api, "/events", &[("Last-Event-ID", &witnessed_last)])
            .expect("GET /events");
    let notice = after_crash
        .next(WAIT)
        .expect("a notice")
        .expect("not ended");
    assert_eq!(notice.event.as_deref(), Some("events-missed"), "{notice:?}");
    let data: Value = serde_json::from_str(&notice.data).expect("JSON");
    assert!(
        data["reason"]
            .as_str()
            .is_some_and(|r| r.contains("the manager restarted")),
        "{data}"
    );
    // Then what the new manager kept, from its first event on.
    let first = after_crash
        .next(WAIT)
        .expect("an event")
        .expect("not ended");
    let data: Value = serde_json::from_str(&first.data).expect("JSON");
    assert_eq!(data["kind"], "manager-started", "{data}");
    assert_eq!(data["incarnation"], 2, "{data}");
    assert_eq!(first.id.as_deref().map(seq), Some(1));
    // The new manager's events flow: a worker killed now is seen, under the new epoch.
    let mut seen = Vec::new();
    let old = kill_worker(&r);
    wait_replaced(&mut after_crash, &mut seen, old);
    let epoch = |id: &str| id.rsplit_once('-').map(|(e, _)| e.to_owned());
    let new_epoch = seen.iter().find_map(|m| m.id.as_deref()).and_then(epoch);
    assert!(
        new_epoch.is_some() && new_epoch != epoch(&witnessed_last),
        "{seen:#?}"
    );
    r.stop();
}

/// A kresctl following the resolver, its standard output as lines on a channel.
struct Following {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Following {
    fn start(r: &common::Resolver, args: &[&str]) -> Following {
        let mut child = Command::new(KRESCTL)
            .arg("-s")
            .arg(&r.api)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kresctl");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Following {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Wait for a line satisfying `pred`; the line.
    fn wait_line(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if pred(&line) {
                        return line;
                    }
                }
                Err(e) => panic!(
                    "no line with {what} ({e}); printed:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// Wait for the process to end; its exit status and standard error.
    fn finish(mut self) -> (std::process::ExitStatus, String, Vec<String>) {
        let mut stderr = self.child.stderr.take().expect("stderr");
        let mut child = self.child;
        let (tx, ended) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        let status = ended
            .recv_timeout(WAIT)
            .expect("kresctl ends")
            .expect("wait");
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        // Its standard output is closed: the reader ends after the last line.
        let mut printed = self.seen;
        printed.extend(self.lines.iter());
        (status, text, printed)
    }
}

#[test]
fn kresctl_events_and_processes_watch_follow_the_resolver_until_it_stops() {
    let r = common::start(&Setup::new("events-kresctl")).expect("start");
    // A known starting point: the id of an event every follower below resumes from, so that
    // none misses what follows whenever it connects.
    let mut stream = EventStream::open(&r.api, "/events", &[]).expect("GET /events");
    let out = r.kresctl(&["reload"]).expect("kresctl reload");
    assert!(out.status.success(), "{out:?}");
    let mut seen = Vec::new();
    let (start, _) = wait_for(&mut stream, &mut seen, "config-reloading", |_| true);
    let start = start.id.expect("an id");
    let (applied, _) = wait_for(&mut stream, &mut seen, "config-applied", |_| true);
    let applied = applied.id.expect("an id");

    let mut human = Following::start(&r, &["events", "--last-event-id", &start]);
    let mut json = Following::start(&r, &["events", "--json", "--last-event-id", &start]);
    let mut watch = Following::start(&r, &["processes", "--watch"]);
    // The replay: the reload's outcome (after the policy-loader's run), after the id resumed
    // from.
    let line = human.wait_line("config-applied", |l| l.contains("config-applied (reload)"));
    assert!(line.contains(&format!(" {applied} ")), "{line}");
    let line = json.wait_line("config-applied", |l| l.contains("config-applied"));
    let data: Value = serde_json::from_str(&line).expect("one JSON object a line");
    assert_eq!(data["cause"], "reload");
    assert_eq!(data["id"], applied.as_str());
    for printed in [&human.seen, &json.seen] {
        assert!(
            !printed.iter().any(|l| l.contains(&start)),
            "the event resumed from is not printed again: {printed:#?}"
        );
    }
    // The table, printed once the stream is open.
    watch.wait_line("the table's head", |l| l.starts_with("NAME"));

    let old = kill_worker(&r);
    let new = wait_replaced(&mut stream, &mut seen, old);
    human.wait_line("the exit", |l| {
        l.contains(&format!(
            "process-exited kresd0 (pid {old}): killed by SIGKILL (9)"
        ))
    });
    human.wait_line("the restart", |l| {
        l.contains(&format!("process-restarted kresd0 (pid {new})"))
    });
    json.wait_line("the exit", |l| {
        serde_json::from_str::<Value>(l)
            .is_ok_and(|d| d["kind"] == "process-exited" && d["pid"] == old)
    });
    watch.wait_line("the exit", |l| l.contains("process-exited kresd0"));
    watch.wait_line("a table with the new pid", |l| {
        l.starts_with("kresd0") && l.split_whitespace().any(|w| w == new.to_string())
    });

    // The resolver stops: every follower ends cleanly (the stream ended, exit 0), not cut by
    // the server's grace period.
    let stopping = Instant::now();
    drop(stream);
    r.stop();
    for (name, follower) in [
        ("events", human),
        ("events --json", json),
        ("processes --watch", watch),
    ] {
        let (status, stderr, printed) = follower.finish();
        let printed = printed.join("\n");
        assert!(
            status.success(),
            "kresctl {name}: {status:?}\n{stderr}\nprinted:\n{printed}"
        );
        assert!(
            stderr.contains("the resolver ended the event stream"),
            "{stderr}"
        );
        if name.starts_with("events") {
            let last = printed.lines().last().unwrap_or_default();
            assert!(last.contains("stopping"), "kresctl {name}: {printed}");
        }
    }
    eprintln!(
        "followers ended {:?} after the stop began",
        stopping.elapsed()
    );
}

#[test]
fn kresctl_events_says_upstreams_manager_has_no_event_stream() {
    let mut upstream = common::start_upstream(&Setup::new("events-upstream")).expect("upstream");
    let out = Command::new(KRESCTL)
        .arg("-s")
        .arg(&upstream.api)
        .arg("events")
        .output()
        .expect("kresctl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("does not offer /events"), "{stderr}");
    let out = Command::new(KRESCTL)
        .arg("-s")
        .arg(&upstream.api)
        .args(["processes", "--watch"])
        .output()
        .expect("kresctl");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not offer /events"));
    let stop = Command::new(KRESCTL)
        .arg("-s")
        .arg(&upstream.api)
        .arg("stop")
        .output()
        .expect("kresctl stop");
    assert!(stop.status.success(), "{stop:?}");
    let status = upstream
        .launched
        .wait(START_TIMEOUT)
        .expect("upstream exits");
    assert!(status.success(), "{status:?}");
}
