//! Tracing one query on real kresd (`GET /trace/{name}/{type}`, `kresctl trace`): a name of
//! local data is answered with no upstream asked (a subtree rule's log says "local data"), a
//! forwarded name's log names the forward target (knotd on loopback); a log over its limit is
//! cut and says so; a target that never answers ends in 504 at the caller's timeout and
//! leaves nothing behind in the worker. The worker's log level and groups stay as they were
//! and nothing of a trace, nor of a later query, reaches the daemon's log. Hostile names
//! reach kresd only as the literal names they are, or are refused (by us or by kresd); none
//! runs as Lua. Over TCP the read-only token is refused a trace (403), the admin token
//! makes one.

mod common;

use std::net::UdpSocket;
use std::process::Command;
use std::time::Duration;

use common::{Resolver, Setup, KRESCTL, START_TIMEOUT, STOP_TIMEOUT};
use serde_json::{json, Value};

/// How many traces are timed.
const RUNS: usize = 11;

const LOCAL_DATA: &str = "local-data:\n  addresses:\n    local.trace.test: 192.0.2.70\n  rules:\n    - name: blocked.zz\n      subtree: nxdomain\n";

/// An authoritative server for `fwd.test.` on loopback: knotd from the bed.
struct Authoritative {
    port: u16,
    /// knotd; dropping it kills it.
    _knotd: testbed::Launched,
}

fn start_authoritative(bed: &'static testbed::Bed) -> Authoritative {
    let dir = bed.test_dir("trace-knotd").expect("dir");
    let port = testbed::free_port().expect("port");
    testbed::write(
        &dir.host("fwd.test.zone"),
        "$ORIGIN fwd.test.\n$TTL 3600\n@ SOA ns admin 1 3600 900 604800 60\n@ NS ns\nns A 127.0.0.1\nwww A 192.0.2.71\n",
    )
    .expect("zone file");
    std::fs::create_dir_all(dir.host("db")).expect("db dir");
    let db = dir.bed("db");
    testbed::write(
        &dir.host("knot.conf"),
        &format!(
            "server:\n  listen: 127.0.0.1@{port}\n  rundir: {db}\nlog:\n  - target: stderr\n    any: info\ndatabase:\n  storage: {db}\nzone:\n  - domain: fwd.test\n    file: {zone}\n    zonefile-sync: -1\n",
            db = db.display(),
            zone = dir.bed("fwd.test.zone").display(),
        ),
    )
    .expect("knot.conf");
    let knotd = bed
        .launch_installed(
            std::path::Path::new("/usr/sbin/knotd"),
            &[std::ffi::OsStr::new("-c"), dir.bed("knot.conf").as_os_str()],
            &[],
        )
        .expect("launch knotd");
    knotd
        .output
        .wait_for("loaded, serial", START_TIMEOUT)
        .expect("knotd loaded the zone");
    Authoritative {
        port,
        _knotd: knotd,
    }
}

/// `GET path`: the status, the JSON body (`null` when it is none) and the text.
fn get(r: &Resolver, path: &str) -> (u16, Value, String) {
    let response = r.http("GET", path, b"").expect("GET");
    let value = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
    (response.status, value, response.text())
}

/// A successful trace's JSON.
fn traced(r: &Resolver, path: &str) -> Value {
    let (status, value, text) = get(r, path);
    assert_eq!(status, 200, "{path}: {text}");
    value
}

/// What `expr` evaluates to in worker 0, through its control socket.
fn control(r: &Resolver, expr: &str) -> Value {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime
        .block_on(kres_daemon::control::command(
            &r.dir.host("run/control/0"),
            expr,
            Duration::from_secs(10),
        ))
        .expect("worker 0 answers")
}

/// `text` as one path segment.
fn percent_encoded(text: &str) -> String {
    text.bytes().map(|b| format!("%{b:02X}")).collect()
}

/// A record's text with its whitespace runs made single spaces.
fn record(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn log_of(trace: &Value) -> Vec<String> {
    trace["log"]
        .as_array()
        .expect("a log")
        .iter()
        .map(|l| l.as_str().expect("a line").to_owned())
        .collect()
}

#[test]
fn local_data_and_forwarded_names_are_traced_and_the_workers_logging_is_untouched() {
    let bed = testbed::Bed::get().expect("bed");
    let auth = start_authoritative(bed);
    // A forward target that reads nothing and answers nothing.
    let silent = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let silent_port = silent.local_addr().expect("address").port();
    let extra = format!(
        "{LOCAL_DATA}forward:\n  - subtree: fwd.test\n    servers: ['127.0.0.1@{port}']\n    options: {{authoritative: false, dnssec: false}}\n  - subtree: silent.test\n    servers: ['127.0.0.1@{silent_port}']\n    options: {{authoritative: false, dnssec: false}}\n",
        port = auth.port
    );
    let r = common::start(&Setup::new("trace").extra(&extra)).expect("start");
    let logging = || (control(&r, "log_level()"), control(&r, "log_groups()"));
    let before = logging();
    assert_eq!(before, (json!("notice"), json!({})));

    // Local data: the answer, and no upstream asked.
    let local = traced(&r, "/trace/local.trace.test./A");
    assert_eq!(local["worker"], "kresd0", "{local:#}");
    assert_eq!(local["name"], "local.trace.test.", "{local:#}");
    assert_eq!(local["type"], "A", "{local:#}");
    assert_eq!(local["rcode"], "NOERROR", "{local:#}");
    assert_eq!(local["truncated"], false, "{local:#}");
    let answer: Vec<String> = local["answer"]
        .as_array()
        .expect("answer")
        .iter()
        .map(|a| record(a.as_str().expect("text")))
        .collect();
    assert_eq!(answer, ["local.trace.test. 300 A 192.0.2.70"]);
    let log = log_of(&local);
    assert!(
        log.iter()
            .any(|l| l.contains("'local.trace.test.' type 'A' new uid")),
        "{log:#?}"
    );
    assert!(
        log.iter().any(|l| l.contains("finished in state")),
        "{log:#?}"
    );
    assert!(
        !log.iter().any(|l| l.contains("querying")),
        "local data asks no upstream: {log:#?}"
    );

    // A subtree of local data: kresd's log says so (`blocked.zz` is no special-use name, so
    // only the rule answers it: the bed has no network).
    let blocked = traced(&r, "/trace/x.blocked.zz/AAAA");
    assert_eq!(blocked["rcode"], "NXDOMAIN", "{blocked:#}");
    let log = log_of(&blocked);
    assert!(
        log.iter().any(|l| l.contains("satisfied by local data")),
        "{log:#?}"
    );
    assert!(!log.iter().any(|l| l.contains("querying")), "{log:#?}");

    // How long a trace of local data takes through the API (reported, not asserted).
    let mut took: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let began = std::time::Instant::now();
            traced(&r, "/trace/local.trace.test/A");
            began.elapsed()
        })
        .collect();
    took.sort_unstable();
    eprintln!(
        "a trace of local data through the API: median {:?} of {RUNS}",
        took[RUNS / 2]
    );

    // The log is cut at its limit, and the trace says so.
    let query = kres_daemon::trace::TraceQuery::new("local.trace.test", "A").expect("query");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let limits = kres_daemon::trace::TraceLimits {
        timeout: Duration::from_secs(5),
        log_bytes: 150,
    };
    let cut = runtime
        .block_on(kres_daemon::trace::run(
            &r.dir.host("run/control/0"),
            "kresd0",
            &query,
            limits,
        ))
        .expect("traced");
    assert!(cut.truncated, "{cut:#?}");
    assert!(!cut.log.is_empty(), "{cut:#?}");
    assert!(
        cut.log.iter().map(|l| l.len() + 1).sum::<usize>() <= 150,
        "{cut:#?}"
    );
    assert_eq!(cut.rcode.as_deref(), Some("NOERROR"));
    let whole = traced(&r, "/trace/local.trace.test/A");
    assert_eq!(whole["truncated"], false, "{whole:#}");
    assert!(log_of(&whole).len() > cut.log.len(), "{whole:#} {cut:#?}");

    // A forwarded name: the log names the target it asked.
    let forwarded = traced(&r, "/trace/www.fwd.test/a");
    assert_eq!(forwarded["type"], "A", "{forwarded:#}");
    assert_eq!(forwarded["rcode"], "NOERROR", "{forwarded:#}");
    assert_eq!(
        record(forwarded["answer"][0].as_str().expect("a record")),
        "www.fwd.test. 3600 A 192.0.2.71"
    );
    let target = [
        format!("'127.0.0.1#{}'", auth.port),
        format!("'127.0.0.1#{:05}'", auth.port),
    ];
    let log = log_of(&forwarded);
    assert!(
        log.iter()
            .any(|l| l.contains("querying") && target.iter().any(|t| l.contains(t.as_str()))),
        "the log names {target:?}: {log:#?}"
    );

    // A target that never answers: 504 at the caller's timeout. While the trace waits, the
    // worker serves: a query is answered once the trace is known to run in it.
    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| get(&r, "/trace/www.silent.test/A?timeout=2"));
        testbed::wait_for("the trace to start", START_TIMEOUT, || {
            let running =
                matches!(control(&r, "__kres_trace_runs"), Value::Object(o) if !o.is_empty());
            Ok(running.then_some(()))
        })
        .expect("the trace never started");
        assert_eq!(r.a_records("local.trace.test."), vec!["192.0.2.70"]);
        let (status, _, text) = waiting.join().expect("the trace ends");
        assert_eq!(status, 504, "{text}");
        assert_eq!(text, "the worker gave no answer within 2s\n");
    });
    for bad in ["0", "61", "-1", "x"] {
        let (status, _, text) = get(&r, &format!("/trace/local.trace.test/A?timeout={bad}"));
        assert_eq!(status, 400, "timeout {bad}: {text}");
    }

    // Hostile names reach kresd only as the literal names they are (upstream's domain name
    // pattern allows quotes and brackets), are refused by us (a newline) or by kresd, and
    // never run as Lua: none of them sets the global its injection would set. The ones kresd
    // resolves lie in the local subtree, so that they are answered at once (the test bed has
    // no network: a name outside would wait for the root servers' timeouts).
    let unset = control(&r, "__trace_never_set");
    for (name, want) in [
        ("x'; __trace_injected = 1; --x.blocked.zz", 200),
        ("x\"; __trace_injected = 2; --x.blocked.zz", 200),
        ("x]] __trace_injected = 3 --[[.blocked.zz", 200),
        ("x\\'; __trace_injected = 4; --x.blocked.zz", 200),
        // An empty label: not a domain name.
        ("x'..(function() __trace_injected = 5 end)()..'", 400),
        // A trailing escape character: kresd cannot make a name of it.
        ("x\\", 500),
        ("a\nb.test", 400),
    ] {
        let (status, value, text) = get(&r, &format!("/trace/{}/A", percent_encoded(name)));
        assert_eq!(status, want, "{name:?}: {text}");
        match status {
            200 => assert_eq!(value["name"], name, "{name:?}: {text}"),
            400 => assert!(text.contains("is not a domain name"), "{name:?}: {text}"),
            _ => assert!(
                text.contains("the worker refused the trace"),
                "{name:?}: {text}"
            ),
        }
    }
    assert_eq!(control(&r, "__trace_injected"), unset);
    for rr_type in ["A%27", "A%5D%5D", "A%0A", "TXT%27)%20os.exit(1)%20--"] {
        let (status, _, text) = get(&r, &format!("/trace/local.trace.test/{rr_type}"));
        assert_eq!(status, 400, "{rr_type}: {text}");
        assert!(text.contains("is not a known RR type"), "{rr_type}: {text}");
    }

    // The worker is as it was: the same level and groups, no trace left in progress, and it
    // still traces.
    assert_eq!(logging(), before);
    assert_eq!(control(&r, "__kres_trace_runs"), json!({}));
    assert_eq!(traced(&r, "/trace/local.trace.test/A")["rcode"], "NOERROR");

    // kresctl: the readable trace, and the JSON.
    let out = r
        .kresctl(&["trace", "www.fwd.test", "--timeout", "3"])
        .expect("kresctl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("www.fwd.test A on kresd0: NOERROR in "),
        "{text}"
    );
    assert!(
        text.contains("answer:\n  www.fwd.test. ") && text.contains(" A 192.0.2.71\nlog:\n  ["),
        "{text}"
    );
    let out = r
        .kresctl(&["trace", "local.trace.test", "TXT", "--json"])
        .expect("kresctl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(value["type"], "TXT", "{value:#}");
    assert_eq!(value["answer"], json!([]), "{value:#}");
    let out = r.kresctl(&["trace", "a\nb.test"]).expect("kresctl");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not a domain name"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Nothing of the traces, nor of a query after them, reached the daemon's log: a notice
    // the worker logs after them is the barrier.
    assert_eq!(r.a_records("local.trace.test."), vec!["192.0.2.70"]);
    control(
        &r,
        "log_notice(require('ffi').C.LOG_GRP_SYSTEM, 'trace-test barrier')",
    );
    r.launched
        .output
        .wait_for("trace-test barrier", STOP_TIMEOUT)
        .expect("the barrier is logged");
    let output = r.launched.output.text();
    for needle in [
        "trace.test",
        "fwd.test",
        "blocked.zz",
        "[iterat]",
        "[resolv]",
    ] {
        assert_eq!(output.matches(needle).count(), 0, "{needle} in:\n{output}");
    }
    assert_eq!(logging(), before);
    drop(silent);
    r.stop();
}

#[test]
fn over_tcp_the_read_only_token_is_refused_a_trace_and_the_admin_token_traces() {
    let port = testbed::free_port().expect("port");
    let bed = testbed::Bed::get().expect("bed");
    let tokens = bed.test_dir("trace-tokens").expect("dir");
    testbed::write(&tokens.host("admin"), "admin-token-of-trace\n").expect("token");
    testbed::write(&tokens.host("reader"), "reader-token-of-trace\n").expect("token");
    let r = common::start(
        &Setup::new("trace-tcp")
            .management(&format!("  interface: 127.0.0.1@{port}\n"))
            .extra(LOCAL_DATA)
            .env(
                "KRES_API_TOKEN_FILE",
                tokens.bed("admin").to_str().expect("UTF-8"),
            )
            .env(
                "KRES_API_READ_ONLY_TOKEN_FILE",
                tokens.bed("reader").to_str().expect("UTF-8"),
            ),
    )
    .expect("start");
    let url = format!("http://127.0.0.1:{port}");
    let kresctl = |var: &str, file: &str| {
        Command::new(KRESCTL)
            .args(["-s", &url, "trace", "local.trace.test", "--json"])
            .env(var, tokens.host(file))
            .output()
            .expect("kresctl")
    };
    let out = kresctl("KRES_API_READ_ONLY_TOKEN_FILE", "reader");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "permission denied: GET /trace/local.trace.test/A needs the admin role; this client \
         has the read-only role\n"
    );
    r.launched
        .output
        .wait_for("refused: GET /trace/local.trace.test/A", STOP_TIMEOUT)
        .expect("the refusal is logged");
    let out = kresctl("KRES_API_TOKEN_FILE", "admin");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(value["rcode"], "NOERROR", "{value:#}");
    assert_eq!(
        record(value["answer"][0].as_str().expect("a record")),
        "local.trace.test. 300 A 192.0.2.70"
    );
    r.stop();
}
