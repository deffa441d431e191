//! The API keeps answering while a large configuration is read and validated: that work runs
//! on the blocking pool, not on the manager process's one runtime thread. A `PUT` of 250,000
//! addresses (8 MiB of JSON) whose last address is invalid costs the server a parse and a
//! whole validation, then answers 400; probes (`GET /livez`) and read-only `GET`s sent once
//! the `PUT`'s body is written are each answered while the `PUT` is still outstanding, one
//! after another. Had the validation run on the runtime thread, no probe would be answered
//! before the `PUT`'s 400.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::Setup;

/// Addresses in the configuration: 8 MiB of JSON, under the API's body limit of 10 MiB.
const ADDRESSES: usize = 250_000;

/// Probes that must each be answered while the `PUT` is outstanding.
const PROBES: usize = 6;

/// How long the `PUT` may take at most (a debug build on a loaded 2-core machine); a bound
/// against hanging, never a performance assertion.
const PUT_TIMEOUT: Duration = Duration::from_secs(300);

/// The running configuration with `ADDRESSES` local addresses, the last one invalid.
fn large_invalid_config(r: &common::Resolver) -> Vec<u8> {
    let current = r.http("GET", "/v1/config", b"").expect("GET /v1/config");
    assert_eq!(current.status, 200, "{}", current.text());
    let mut doc: serde_json::Value = serde_json::from_slice(&current.body).expect("JSON");
    let mut addresses = serde_json::Map::new();
    for i in 0..ADDRESSES {
        let ip = format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255);
        addresses.insert(format!("host{i}.big.test"), ip.into());
    }
    addresses.insert(last_name(), "not-an-address".into());
    doc["local-data"] = serde_json::json!({ "addresses": addresses });
    let body = serde_json::to_vec(&doc).expect("JSON");
    assert!(body.len() > 8 << 20, "{} bytes", body.len());
    body
}

fn last_name() -> String {
    format!("host{}.big.test", ADDRESSES - 1)
}

/// What the `PUT`'s thread reports: its body was written, then its answer (status and body)
/// arrived.
enum PutProgress {
    Sent,
    Answered(Result<(u16, String), String>),
}

/// Send `PUT /v1/config` with `body` over the API socket; report when the body is written and
/// when the answer has arrived.
fn put(api: std::path::PathBuf, body: Vec<u8>, progress: mpsc::Sender<PutProgress>) {
    let answer = (|| -> std::io::Result<(u16, String)> {
        let mut s = UnixStream::connect(&api)?;
        s.set_read_timeout(Some(PUT_TIMEOUT))?;
        let head = format!(
            "PUT /v1/config HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes())?;
        s.write_all(&body)?;
        let _ = progress.send(PutProgress::Sent);
        let mut raw = Vec::new();
        s.read_to_end(&mut raw)?;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        Ok((status, text))
    })();
    let _ = progress.send(PutProgress::Answered(answer.map_err(|e| e.to_string())));
}

#[test]
fn probes_and_reads_are_answered_while_a_large_configuration_is_validated() {
    let r = common::start(&Setup::new("responsive-api")).expect("starts");
    let body = large_invalid_config(&r);
    let (progress, events) = mpsc::channel();
    let putting = std::thread::spawn({
        let api = r.api.clone();
        move || put(api, body, progress)
    });
    match events.recv_timeout(PUT_TIMEOUT) {
        Ok(PutProgress::Sent) => {}
        Ok(PutProgress::Answered(answer)) => panic!("the PUT failed to send: {answer:?}"),
        Err(e) => panic!("the PUT's body was not written: {e}"),
    }
    let mut latencies = Vec::new();
    for i in 0..PROBES {
        let (path, expected) = if i % 2 == 0 {
            ("/livez", "")
        } else {
            ("/v1/config/workers", "1")
        };
        let began = Instant::now();
        let answer = r.http("GET", path, b"").expect("a probe");
        latencies.push(began.elapsed());
        assert_eq!(answer.status, 200, "{path}: {}", answer.text());
        if !expected.is_empty() {
            assert_eq!(answer.text().trim(), expected, "{path}");
        }
        // The probe's answer is here: the PUT's must not be yet.
        match events.try_recv() {
            Err(mpsc::TryRecvError::Empty) => {}
            other => panic!(
                "probe {} of {PROBES} ({path}) was answered only after the PUT: {:?}",
                i + 1,
                other.map(|p| match p {
                    PutProgress::Sent => "sent".to_owned(),
                    PutProgress::Answered(a) => format!("{a:?}").chars().take(300).collect(),
                })
            ),
        }
    }
    let answer = match events.recv_timeout(PUT_TIMEOUT) {
        Ok(PutProgress::Answered(answer)) => answer.expect("the PUT's answer"),
        Ok(PutProgress::Sent) => unreachable!("sent once"),
        Err(e) => panic!("no answer to the PUT: {e}"),
    };
    putting.join().expect("the PUT's thread");
    assert_eq!(answer.0, 400, "{}", &answer.1[..answer.1.len().min(2000)]);
    assert!(
        answer
            .1
            .contains(&format!("/local-data/addresses/{}", last_name())),
        "the 400 names the invalid address: {}",
        &answer.1[..answer.1.len().min(2000)]
    );
    eprintln!("probe latencies while the PUT was validated: {latencies:?}");
    // The configuration did not change.
    let workers = r.http("GET", "/v1/config/local-data", b"").expect("GET");
    assert_eq!(workers.status, 404, "{}", workers.text());
    r.stop();
}
