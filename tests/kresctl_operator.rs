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
    let mut stream =
        testbed::http::EventStream::open(&r.api, "/events", &[]).expect("GET /events");
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
