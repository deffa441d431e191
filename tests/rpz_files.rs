//! The files RPZ entries name, as validation and the running resolver see them: one file per
//! entry, and only regular files where the manager reads them itself (a zone kept by
//! transfer, its TSIG key). A FIFO there is refused at once with an error naming it, never
//! opened in a way that waits for a writer, while the API and DNS keep answering.

mod common;

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use common::{Resolver, Setup};
use kres_config::{validate, PathChecks, ValidationContext};
use serde_json::{json, Value};

/// How long a request may take before the test calls the manager stalled.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// The zone the entries keep by transfer.
const ZONE: &str = "blocklist.rpz.";

/// Errors of `doc` under `local-data`, as (path, message), validated as the root process
/// validates at start (every path checked).
fn strict_errors(dir: &Path, doc: &Value) -> Vec<(String, String)> {
    let ctx = ValidationContext {
        resolve_root: dir.to_owned(),
        checks: PathChecks::Strict,
        logtarget_arg: Default::default(),
    };
    match validate(doc, &ctx) {
        Ok(_) => Vec::new(),
        // The machine's own paths (rundir, cache) are not this test's concern.
        Err(errors) => errors
            .0
            .into_iter()
            .filter(|e| e.path.starts_with("/local-data"))
            .map(|e| (e.path, e.message))
            .collect(),
    }
}

fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
}

/// Nobody has `fifo` open for reading, nor waits in an open of it: a writer's open that
/// would not wait fails with ENXIO.
fn nobody_reads(fifo: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(fifo);
    matches!(opened, Err(e) if e.raw_os_error() == Some(nix::libc::ENXIO))
}

#[test]
fn two_entries_naming_one_file_are_refused_naming_both() {
    let dir = std::env::temp_dir().join(format!("kres-rpz-shared-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let zone = dir.join("a.rpz");
    std::fs::write(&zone, format!("{ZONE} 60 IN SOA ns. host. 1 1 1 1 1\n")).expect("zone");
    let other = dir.join("b.rpz");
    std::fs::copy(&zone, &other).expect("zone");
    let link = dir.join("link.rpz");
    std::os::unix::fs::symlink(&zone, &link).expect("link");
    let kept = dir.join("kept.rpz");
    let transfer = json!({"zone": ZONE, "primaries": ["127.0.0.1@5353"]});
    let doc = |entries: Value| json!({"rundir": dir, "local-data": {"rpz": entries}});
    let shared = |second: usize, first: usize, file: &Path| {
        (
            format!("/local-data/rpz/{second}/file"),
            format!(
                "file '{}' is already the file of '/local-data/rpz/{first}': two RPZ entries cannot share one file",
                file.display()
            ),
        )
    };
    let rows = [
        (
            "two files",
            doc(json!([{"file": zone}, {"file": other}])),
            vec![],
        ),
        (
            "one file twice",
            doc(json!([{"file": zone}, {"file": zone}])),
            vec![shared(1, 0, &zone)],
        ),
        (
            "one file written another way",
            doc(json!([{"file": zone}, {"file": format!("{}/./a.rpz", dir.display())}])),
            vec![shared(1, 0, &zone)],
        ),
        (
            "one file through a link",
            doc(json!([{"file": zone}, {"file": link}])),
            vec![shared(1, 0, &link)],
        ),
        (
            "a file kept by transfer and read as it is",
            doc(
                json!([{"file": kept, "transfer": transfer}, {"file": other}, {"file": kept, "transfer": transfer}]),
            ),
            vec![shared(2, 0, &kept)],
        ),
        (
            "three times",
            doc(json!([{"file": zone}, {"file": zone}, {"file": zone}])),
            vec![shared(1, 0, &zone), shared(2, 0, &zone)],
        ),
    ];
    for (what, document, expected) in rows {
        assert_eq!(strict_errors(&dir, &document), expected, "{what}");
    }
    // kresctl validate names both entries too.
    let file = dir.join("config.json");
    let document = doc(json!([{"file": zone}, {"file": zone}]));
    std::fs::write(&file, document.to_string()).expect("config");
    let out = std::process::Command::new(common::KRESCTL)
        .arg("validate")
        .arg(&file)
        .output()
        .expect("kresctl");
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("/local-data/rpz/1/file") && text.contains("'/local-data/rpz/0'"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn files_that_are_not_regular_are_refused_by_validation_without_a_wait() {
    let dir = std::env::temp_dir().join(format!("kres-rpz-fifo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let fifo = dir.join("fifo");
    mkfifo(&fifo);
    let new_file = dir.join("not-yet.rpz");
    let transfer = |key: Option<&Path>| {
        let mut t = json!({"zone": ZONE, "primaries": ["127.0.0.1@5353"]});
        if let Some(key) = key {
            t["tsig-key-file"] = json!(key);
        }
        t
    };
    let doc = |entry: Value| json!({"rundir": dir, "local-data": {"rpz": [entry]}});
    let fifo_text = format!("'{}' is a FIFO, not a regular file", fifo.display());
    let rows = [
        (
            doc(json!({"file": new_file, "transfer": transfer(Some(&fifo))})),
            "/local-data/rpz/0/transfer/tsig-key-file",
            format!("key file {fifo_text}"),
        ),
        (
            doc(json!({"file": fifo, "transfer": transfer(None)})),
            "/local-data/rpz/0/file",
            format!("file {fifo_text}"),
        ),
        (
            doc(json!({"file": new_file, "transfer": transfer(Some(Path::new("/dev/zero")))})),
            "/local-data/rpz/0/transfer/tsig-key-file",
            "key file '/dev/zero' is a character device, not a regular file".to_owned(),
        ),
        (
            doc(json!({"file": dir, "transfer": transfer(None)})),
            "/local-data/rpz/0/file",
            // The type of a file kept by transfer (upstream's "writable file path") says it.
            format!(
                "path '{}' points to a directory when we expected a file",
                dir.display()
            ),
        ),
        (
            // Upstream's type of a file read as it is says it in upstream's words.
            doc(json!({"file": fifo})),
            "/local-data/rpz/0/file",
            format!("path '{}' is not a file", fifo.display()),
        ),
    ];
    for (document, path, message) in rows {
        let errors = strict_errors(&dir, &document);
        assert!(
            errors.iter().any(|(p, m)| p == path && m == &message),
            "{document}: {errors:?}"
        );
    }
    assert!(nobody_reads(&fifo), "validation opened the FIFO");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

/// Run `request` on a thread of its own; its answer within [`ANSWER_TIMEOUT`], or a failed
/// test that says what stalled.
fn answered<T: Send + 'static>(what: &str, request: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(request());
    });
    rx.recv_timeout(ANSWER_TIMEOUT)
        .unwrap_or_else(|_| panic!("{what}: no answer within {ANSWER_TIMEOUT:?}"))
}

/// `GET path` on `r`'s API, answered within the timeout with 200.
fn get_ok(r: &Resolver, path: &'static str) -> Vec<u8> {
    let api = r.api.clone();
    let answer = answered(path, move || {
        testbed::http::request(&api, "GET", path, &[], b"").expect("request")
    });
    assert_eq!(answer.status, 200, "{path}: {}", answer.text());
    answer.body
}

#[test]
fn a_fifo_as_a_zone_or_its_key_is_refused_while_the_api_and_dns_answer() {
    let bed = testbed::Bed::get().expect("bed");
    let r = common::start(
        &Setup::new("rpz-fifo")
            .workers(2)
            .extra("local-data:\n  records: |\n    p.test. 300 A 192.0.2.7\n"),
    )
    .expect("start");
    let files = bed.test_dir("rpz-fifo-files").expect("dir");
    std::fs::create_dir_all(files.host("zones")).expect("dir");
    let (key_host, key_bed) = files.join("xfr.key");
    mkfifo(&key_host);
    let (zone_fifo_host, zone_fifo_bed) = files.join("zones/fifo.rpz");
    mkfifo(&zone_fifo_host);
    let (_, zone_bed) = files.join("zones/blocklist.rpz");
    let nobody = testbed::free_port().expect("port");
    let transfer = |key: Option<&Path>| {
        let mut t = json!({"zone": ZONE, "primaries": [format!("127.0.0.1@{nobody}")]});
        if let Some(key) = key {
            t["tsig-key-file"] = json!(key);
        }
        t
    };
    let config_before = get_ok(&r, "/v1/config");
    let rows = [
        (
            "a FIFO as the TSIG key",
            json!([{"file": zone_bed, "transfer": transfer(Some(&key_bed))}]),
            "/local-data/rpz/0/transfer/tsig-key-file",
            format!(
                "key file '{}' is a FIFO, not a regular file",
                key_bed.display()
            ),
        ),
        (
            "a FIFO as the zone kept by transfer",
            json!([{"file": zone_fifo_bed, "transfer": transfer(None)}]),
            "/local-data/rpz/0/file",
            format!(
                "file '{}' is a FIFO, not a regular file",
                zone_fifo_bed.display()
            ),
        ),
    ];
    for (what, entries, path, message) in rows {
        // The change and the API's other answers, all at once.
        let api = r.api.clone();
        let body = entries.to_string();
        let (tx, put) = mpsc::channel();
        std::thread::spawn(move || {
            let answer = testbed::http::request(
                &api,
                "PUT",
                "/v1/config/local-data/rpz",
                &[("Content-Type", "application/json")],
                body.as_bytes(),
            );
            let _ = tx.send(answer);
        });
        assert_eq!(get_ok(&r, "/v1/config"), config_before, "{what}");
        get_ok(&r, "/livez");
        let answer = put
            .recv_timeout(ANSWER_TIMEOUT)
            .unwrap_or_else(|_| panic!("{what}: the change got no answer"))
            .expect("PUT");
        let text = answer.text();
        eprintln!("{what}: {} {text}", answer.status);
        assert!((400..500).contains(&answer.status), "{what}: {text}");
        assert!(
            text.contains(path) && text.contains(&message),
            "{what}: {text}"
        );
        // kresctl says the same.
        let api = r.api.clone();
        let value = entries.to_string();
        let out = answered("kresctl config set", move || {
            std::process::Command::new(common::KRESCTL)
                .arg("-s")
                .arg(&api)
                .args(["config", "set", "-p", "/local-data/rpz", &value])
                .output()
                .expect("kresctl")
        });
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what}: {stderr}");
        assert!(stderr.contains(&message), "{what}: {stderr}");
        // Nothing changed, nothing waits on the FIFOs, and DNS is answered.
        assert_eq!(get_ok(&r, "/v1/config"), config_before, "{what}");
        get_ok(&r, "/livez");
        assert!(nobody_reads(&key_host), "{what}: the key FIFO is open");
        assert!(
            nobody_reads(&zone_fifo_host),
            "{what}: the zone FIFO is open"
        );
        assert_eq!(r.a_records("p.test."), vec!["192.0.2.7"], "{what}");
    }
    r.stop();
}
