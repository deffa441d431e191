//! The API does what its OpenAPI document says, tried by a property-based tester driven by
//! the document itself: schemathesis (Python, run as a child process) reads `/openapi.json`
//! from a real resolver serving its API on loopback TCP, generates requests for every
//! operation (valid and invalid parameters, headers and bodies), sends them, and makes every
//! check it has (`--checks all`): no 5xx, a status the document lists for the operation, the
//! content type and headers it names, a body its schema accepts (each event of an event
//! stream too), data the document allows accepted and data it forbids refused, a method the
//! path does not serve answered 405 with its `Allow`. The test fails, never skips, without
//! the tester (`tests/run.sh` installs it).
//!
//! The endless streams (`/events`, `/query-log/stream`) are read for 2 s each (the tester's
//! per-operation request timeout, in [`TESTER_CONFIG`]): the events that came by then are
//! checked against the document. The query log is on and a client asks a local name every
//! [`QUERY_EVERY`] while the tester runs, so the query log's lists and stream carry answers.
//!
//! Left out: what ends or disturbs the resolver for the rest of the run (`/stop`, `/drain`,
//! `/upgrade`, `/cache/clear`) and `/trace` (kresd would resolve generated names, which the
//! test bed's loopback-only rule forbids).

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use common::Setup;
use testbed::dns;

/// The Python package of the tester, and the version CI installs.
const TESTER: &str = "schemathesis==4.32.5";

/// Paths the tester leaves out (see the module's header), as one regular expression.
const LEFT_OUT: &str = "^/(stop|drain|upgrade|cache/clear|trace/.*)$";

/// The tester's configuration (`schemathesis.toml`) beside the command line: what it needs
/// per operation.
///
/// - The endless streams are read for 2 s each (the request timeout of their operations),
///   then the events that came are checked.
/// - A change of the configuration its JSON schema allows may still be refused by the
///   configuration's validator (400: rules across fields, files that must exist, sections
///   fixed at start-up, a JSON pointer's value of the wrong type: nothing a schema of the
///   request can say), and a well-formed `If-Match` naming another version is refused with
///   412 on every `/v1/config` route: the document cannot know the current ETag. These
///   statuses count as answers to valid data there, and there only.
const TESTER_CONFIG: &str = r#"
[[operations]]
include-path-regex = "^/(events|query-log/stream)$"
request-timeout = 2

[[operations]]
include-path-regex = "^/v1/config"
include-method = ["PUT", "PATCH", "DELETE"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "400", "401", "403", "404", "409", "412", "429", "5xx"]

[[operations]]
include-path-regex = "^/v1/config"
include-method = ["GET", "HEAD"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "412", "429", "5xx"]
"#;

/// The operations the document describes less those left out: all of them must be tried.
const OPERATIONS: usize = 60;

/// How often the client asks while the tester runs.
const QUERY_EVERY: Duration = Duration::from_millis(50);

/// Cases generated per operation, and the seed that makes a run repeatable.
const EXAMPLES: &str = "10";
const SEED: &str = "38";

#[test]
fn generated_requests_get_the_answers_the_document_describes() {
    let port = testbed::free_port().expect("a free port");
    let mut r = common::start(
        &Setup::new("api-conformance")
            .management(&format!("  interface: 127.0.0.1@{port}\n"))
            .extra(
                "monitoring:\n  query-log:\n    enabled: true\nlocal-data:\n  records: |\n    \
                 a.conformance.test. 60 A 192.0.2.1\n",
            ),
    )
    .expect("the resolver starts");
    let dns = r.dns();
    let bed = testbed::Bed::get().expect("the test bed");
    let reports = bed.test_dir("api-conformance-report").expect("a directory");
    let url = format!("http://127.0.0.1:{port}");
    // The tester reloads and changes the configuration hundreds of times: each change is
    // told to the service manager, whose part is played here (a notify queue left full
    // would hold the root's next notification, and every change after it).
    let listening = AtomicBool::new(true);
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let output = std::thread::scope(|scope| {
        let notify = &mut r.notify;
        scope.spawn(|| {
            while listening.load(Ordering::SeqCst) {
                let _ = notify.wait_for("(never sent)", Duration::from_millis(200));
            }
        });
        // The client: its answers may fail when the tester has changed the configuration.
        scope.spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = finished.recv_timeout(QUERY_EVERY) {
                let _ = dns::query_udp(dns, "a.conformance.test.", dns::TYPE_A, QUERY_EVERY);
            }
        });
        let output = tester(&url, &reports.host(""));
        listening.store(false, Ordering::SeqCst);
        drop(done);
        output
    });
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("No module named"),
        "the tester is missing: pip install {TESTER}\n{stderr}"
    );
    assert!(
        output.status.success(),
        "the API disagrees with its document:\n{stdout}\n{stderr}\ndaemon output:\n{}",
        r.launched.output.text()
    );
    // The run tried the operations: not an empty selection passing vacuously.
    let tested: usize = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("Tested:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_default();
    assert!(
        tested >= OPERATIONS,
        "{tested} operations tested:\n{stdout}"
    );
    eprintln!("{stdout}");
    r.stop();
}

/// Run the tester against the API at `url`, with its reports, cache and configuration in
/// `dir`.
fn tester(url: &str, dir: &Path) -> std::process::Output {
    let config = dir.join("schemathesis.toml");
    std::fs::write(&config, TESTER_CONFIG).expect("the tester's configuration");
    Command::new("python3")
        .args(["-m", "schemathesis.cli", "--config-file"])
        .arg(&config)
        .arg("run")
        .arg(format!("{url}/openapi.json"))
        .args(["--url", url])
        .args(["--checks", "all"])
        .args(["--exclude-path-regex", LEFT_OUT])
        .args(["--max-examples", EXAMPLES, "--seed", SEED])
        .args(["--workers", "1", "--request-timeout", "60"])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args(["--suppress-health-check", "all"])
        .arg("--no-color")
        // A failing run lists every disagreement, not only the first of each operation.
        .arg("--continue-on-failure")
        .arg("--report-dir")
        .arg(dir)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 ({e}): install python3 and {TESTER}"))
}
