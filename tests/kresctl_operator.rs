//! kresctl as an operator meets it, against real kresd: every command ends quietly with exit 0
//! when its reader is gone (`| head -1`), even one that prints only when something happens.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{Setup, KRESCTL};

/// Bound for a kresctl to end once its reader is gone (a loaded 2-core machine included).
const WAIT: Duration = Duration::from_secs(30);

/// kresctl against `r` with `args`, its standard output and error piped.
fn spawn(r: &common::Resolver, args: &[&str]) -> Child {
    Command::new(KRESCTL)
        .arg("-s")
        .arg(&r.api)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kresctl")
}

/// Read `child`'s first line as `head -1` does, close the pipe, and wait for the end: its
/// exit status, the line and what it wrote to standard error.
fn head_one(mut child: Child) -> (ExitStatus, String, String) {
    let mut reader = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    reader.read_line(&mut line).expect("a first line");
    drop(reader);
    let mut stderr = child.stderr.take().expect("stderr");
    let (tx, ended) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = ended
        .recv_timeout(WAIT)
        .unwrap_or_else(|_| panic!("kresctl still runs {WAIT:?} after its reader left"))
        .expect("wait");
    let mut text = String::new();
    let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
    (status, line, text)
}

#[test]
fn every_command_ends_quietly_when_its_reader_is_gone() {
    let r = common::start(&Setup::new("kresctl-pipe")).expect("start");
    // An event to print at once: the reload's, replayed after the id before it.
    let mut stream = testbed::http::EventStream::open(&r.api, "/events", &[]).expect("GET /events");
    let out = r.kresctl(&["reload"]).expect("kresctl reload");
    assert!(out.status.success(), "{out:?}");
    let first = stream
        .next(WAIT)
        .expect("an event")
        .expect("the stream goes on");
    let before = first.id.expect("an id");
    drop(stream);

    for args in [
        &["openapi"][..],
        &["openapi", "--local"],
        &["schema"],
        &["config", "get"],
        &["events", "--last-event-id", &before],
        &["events", "--json", "--last-event-id", &before],
        // Prints its table, then only when a process event comes: none will.
        &["processes", "--watch"],
        &["completion"],
        &["convert", &r.config.display().to_string()],
    ] {
        let (status, line, stderr) = head_one(spawn(&r, args));
        assert!(!line.is_empty(), "kresctl {args:?} printed nothing");
        assert_eq!(
            (status.code(), stderr.as_str()),
            (Some(0), ""),
            "kresctl {args:?}"
        );
    }
    r.stop();
}

/// What `program` with `args` prints in the bed, within [`WAIT`].
fn run_in_bed(r: &common::Resolver, program: Program<'_>, args: &[&str]) -> String {
    let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    let mut launched = match program {
        Program::Ours(path) => r.bed.launch(std::path::Path::new(path), &args, &[]),
        Program::Installed(path) => r
            .bed
            .launch_installed(std::path::Path::new(path), &args, &[]),
    }
    .expect("launch in the bed");
    let status = launched.wait(WAIT).expect("it ends");
    assert!(launched.output.wait_eof(WAIT), "its output ends");
    let text = launched.output.text();
    assert!(status.success(), "{args:?}: {status:?}\n{text}");
    text
}

/// A program to run in the bed: one of ours (by its path here), or one the bed has.
#[derive(Clone, Copy)]
enum Program<'a> {
    Ours(&'a str),
    Installed(&'a str),
}

#[test]
fn versions_name_ours_and_the_kresd_we_drive() {
    let r = common::start(&Setup::new("kresctl-versions")).expect("start");
    let said = run_in_bed(&r, Program::Installed("/usr/sbin/kresd"), &["--version"]);
    let kresd = said
        .split_whitespace()
        .last()
        .expect("kresd says its version")
        .to_owned();
    let ours = kres_daemon::build_version();

    // kresctl -V, on the machine of the kresd.
    let line = run_in_bed(&r, Program::Ours(KRESCTL), &["-V"]);
    assert_eq!(
        line.trim(),
        format!("kresctl {ours} (kresd {kresd}, /usr/sbin/kresd)")
    );

    // GET /, once the manager learned it.
    let greeting = testbed::wait_for("GET / names kresd's version", WAIT, || {
        let response = r.http("GET", "/", b"")?;
        let body: serde_json::Value = serde_json::from_slice(&response.body)?;
        Ok((!body["kresd_version"].is_null()).then_some(body))
    })
    .expect("kresd's version is known");
    assert_eq!(greeting["version"], ours.as_str(), "{greeting}");
    assert_eq!(greeting["kresd_version"], kresd.as_str(), "{greeting}");

    // knot_resolver_build_info.
    let metrics = r
        .http("GET", "/metrics/prometheus", b"")
        .expect("GET /metrics");
    let text = metrics.text();
    let info = text
        .lines()
        .find(|l| l.starts_with("knot_resolver_build_info{"))
        .unwrap_or_else(|| panic!("no build_info in\n{text}"));
    assert_eq!(
        info,
        format!("knot_resolver_build_info{{version=\"{ours}\",kresd_version=\"{kresd}\"}} 1.0")
    );

    // The start-up line: the versions, the configuration file, the users.
    let line = r
        .launched
        .output
        .wait_for("driving kresd", WAIT)
        .expect("the start-up line");
    let config = r.dir.bed("config.yaml");
    for part in [
        format!("knot-resolver {ours} driving kresd {kresd} (/usr/sbin/kresd)"),
        format!("configuration {}", config.display()),
        "manager process as user root (uid 0), workers as user root (uid 0)".to_owned(),
    ] {
        assert!(line.contains(&part), "{part:?} not in {line}");
    }
    r.stop();
}

/// kresctl as user `nobody` (uid and gid 65534, no other group), through setpriv(1).
fn kresctl_as_nobody(r: &common::Resolver, args: &[&str]) -> std::process::Output {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            KRESCTL,
            "-s",
        ])
        .arg(&r.api)
        .args(args)
        .output()
        .expect("setpriv kresctl")
}

#[test]
fn hints_fit_the_cause() {
    let r = common::start(&Setup::new("kresctl-hints")).expect("start");

    // Refused by the socket's permissions: who may, not whether the resolver runs.
    let out = kresctl_as_nobody(&r, &["config", "get"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("Permission denied"), "{stderr}");
    assert!(!stderr.contains("Is the resolver running?"), "{stderr}");
    assert!(
        stderr.contains("belongs to user root and group root") && stderr.contains("runs as "),
        "{stderr}"
    );

    // A pointer without its leading `/`.
    let out = r
        .kresctl(&["config", "get", "-p", "workers", "--json"])
        .expect("kresctl");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1");

    // An invalid value: one header.
    let out = r
        .kresctl(&["config", "set", "-p", "/workers", "\"many\""])
        .expect("kresctl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.matches("validation error").count(),
        1,
        "one header: {stderr}"
    );

    // Usage errors are upstream's exit 2 (`-s SOCKET` alone included).
    for args in [&[][..], &["config"], &["cache"]] {
        let out = r.kresctl(args).expect("kresctl");
        assert_eq!(out.status.code(), Some(2), "kresctl {args:?}: {out:?}");
        assert!(
            out.stdout.is_empty(),
            "kresctl {args:?}: help goes to stderr"
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains("Usage:"));
    }
    r.stop();
}

#[test]
fn a_refused_token_names_the_token_variable() {
    let token = "s3cret-token-for-kresctl";
    let bed = testbed::Bed::get().expect("bed");
    let port = testbed::free_port().expect("port");
    let dir = bed.test_dir("kresctl-token").expect("dir");
    let file = dir.host("token");
    std::fs::write(&file, token).expect("token file");
    let r = common::start(
        &Setup::new("kresctl-token-api")
            .management(&format!("  interface: 127.0.0.1@{port}\n"))
            .env(
                "KRES_API_TOKEN_FILE",
                &dir.bed("token").display().to_string(),
            ),
    )
    .expect("start");
    let url = format!("http://127.0.0.1:{port}");
    let wrong = dir.host("wrong");
    std::fs::write(&wrong, "not-the-token").expect("wrong token file");
    let out = Command::new(KRESCTL)
        .args(["-s", &url, "config", "get"])
        .env("KRES_API_TOKEN_FILE", &wrong)
        .output()
        .expect("kresctl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("KRES_API_TOKEN_FILE"), "{stderr}");
    let out = Command::new(KRESCTL)
        .args(["-s", &url, "config", "get", "-p", "/workers"])
        .env("KRES_API_TOKEN_FILE", &file)
        .output()
        .expect("kresctl");
    assert!(out.status.success(), "{out:?}");
    // --help names it too.
    let help = Command::new(KRESCTL)
        .arg("--help")
        .output()
        .expect("kresctl");
    assert!(String::from_utf8_lossy(&help.stdout).contains("KRES_API_TOKEN_FILE"));
    r.stop();
}

/// What bash's completion offers after `words` (the last being completed) with `script`
/// loaded and our kresctl first on `PATH`.
fn bash_offers(script: &std::path::Path, words: &[&str]) -> Vec<String> {
    let bin = std::path::Path::new(KRESCTL).parent().expect("a directory");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let program = format!(
        "source '{}'\nCOMP_WORDS=(kresctl {})\nCOMP_CWORD={}\n_kresctl_completion 2>/dev/null\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        script.display(),
        quoted.join(" "),
        words.len()
    );
    let out = Command::new("bash")
        .args(["--norc", "-c", &program])
        .env("PATH", path)
        .output()
        .expect("bash");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn bash_completes_pointers_from_the_schema_with_either_script() {
    let bed = testbed::Bed::get().expect("bed");
    let dir = bed.test_dir("kresctl-completion").expect("dir");
    let ours = dir.host("kresctl.bash");
    let script = Command::new(KRESCTL)
        .args(["completion", "bash"])
        .output()
        .expect("kresctl completion");
    assert!(script.status.success());
    std::fs::write(&ours, &script.stdout).expect("write");
    let upstreams = bed.host_path(std::path::Path::new(
        "/usr/share/bash-completion/completions/kresctl",
    ));
    for script in [&ours, &upstreams] {
        let offered = bash_offers(script, &["config", "get", "-p", "/"]);
        assert!(
            offered.iter().any(|w| w == "/workers") && offered.iter().any(|w| w == "/cache"),
            "{}: {offered:?}",
            script.display()
        );
        // Pointers only, no file of the root directory.
        assert!(
            offered.iter().all(|w| !w.starts_with("/usr")),
            "{}: {offered:?}",
            script.display()
        );
        let offered = bash_offers(script, &["config", "get", "-p", "/cache/s"]);
        assert_eq!(
            offered,
            vec!["/cache/storage", "/cache/size-max"],
            "{}",
            script.display()
        );
        let offered = bash_offers(script, &["conf"]);
        assert_eq!(offered, vec!["config"], "{}", script.display());
    }
}
