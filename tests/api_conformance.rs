//! The API does what its OpenAPI document says, tried by a property-based tester driven by
//! the document itself: schemathesis (Python, run as a child process) reads `/openapi.json`
//! from a real resolver serving its API on loopback TCP, generates requests for every
//! operation (valid and invalid parameters, headers and bodies), sends them, and checks every
//! answer: no 5xx, a status the document lists for the operation, the content type and
//! headers it names, a body its schema accepts. The test fails, never skips, without the
//! tester (`tests/run.sh` installs it).
//!
//! Left out: what ends or disturbs the resolver for the rest of the run (`/stop`, `/drain`,
//! `/upgrade`, `/cache/clear`), `/trace` (kresd would resolve generated names, which the
//! test bed's loopback-only rule forbids) and `/events` and `/query-log/stream` (endless
//! streams: every request would last until the tester's time limit).

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::Setup;

/// The Python package of the tester, and the version CI installs.
const TESTER: &str = "schemathesis==4.32.5";

/// Paths the tester leaves out (see the module's header), as one regular expression.
const LEFT_OUT: &str = "^/(stop|drain|upgrade|cache/clear|trace/.*|events|query-log/stream)$";

/// The checks made on every answer.
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,\
response_headers_conformance,response_schema_conformance";

/// The operations the document describes less those left out: all of them must be tried.
const OPERATIONS: usize = 55;

/// Cases generated per operation, and the seed that makes a run repeatable.
const EXAMPLES: &str = "10";
const SEED: &str = "38";

#[test]
fn generated_requests_get_the_answers_the_document_describes() {
    let port = testbed::free_port().expect("a free port");
    let mut r = common::start(
        &Setup::new("api-conformance").management(&format!("  interface: 127.0.0.1@{port}\n")),
    )
    .expect("the resolver starts");
    let bed = testbed::Bed::get().expect("the test bed");
    let reports = bed.test_dir("api-conformance-report").expect("a directory");
    let url = format!("http://127.0.0.1:{port}");
    // The tester reloads and changes the configuration hundreds of times: each change is
    // told to the service manager, whose part is played here (a notify queue left full
    // would hold the root's next notification, and every change after it).
    let listening = AtomicBool::new(true);
    let output = std::thread::scope(|scope| {
        let notify = &mut r.notify;
        scope.spawn(|| {
            while listening.load(Ordering::SeqCst) {
                let _ = notify.wait_for("(never sent)", Duration::from_millis(200));
            }
        });
        let output = tester(&url, &reports.host(""));
        listening.store(false, Ordering::SeqCst);
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

/// Run the tester against the API at `url`, with its reports and cache in `dir`.
fn tester(url: &str, dir: &Path) -> std::process::Output {
    Command::new("python3")
        .args(["-m", "schemathesis.cli", "run"])
        .arg(format!("{url}/openapi.json"))
        .args(["--url", url])
        .args(["--checks", CHECKS])
        .args(["--exclude-path-regex", LEFT_OUT])
        .args(["--max-examples", EXAMPLES, "--seed", SEED])
        .args(["--workers", "1", "--request-timeout", "60"])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args(["--suppress-health-check", "all"])
        .arg("--no-color")
        .arg("--report-dir")
        .arg(dir)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 ({e}): install python3 and {TESTER}"))
}
