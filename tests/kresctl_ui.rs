//! `kresctl ui` against the real daemon and real kresd: run by root over the API's unix
//! socket (root's role: admin), and tried by another user of the same host, uid 65534 (a raw
//! HTTP client run through setpriv, and kresctl itself). Without this run's secret every
//! request but the page's files is refused with 403 before it reaches the API: `POST /stop`,
//! `PUT /v1/config`, `GET /v1/config`, with a wrong secret, or with the secret in a cookie
//! (which a browser would send to every port of 127.0.0.1) or as a bearer token; the
//! resolver runs on and its configuration keeps its ETag. With the secret of the URL
//! kresctl printed in its header, the same user reads and changes the configuration.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{serve_ui, KresctlUi, Setup, KRESCTL};
use serde_json::json;
use testbed::http::HttpResponse;

/// setpriv's arguments for uid and gid 65534 (`nobody`), no other group.
const AS_NOBODY: [&str; 4] = ["--reuid=65534", "--regid=65534", "--clear-groups", "--"];

/// A raw HTTP client in perl (which the test bed's host has): connects to the address of its
/// argument, sends its standard input, prints the whole answer; says its uid on stderr.
const CLIENT: &str = r#"
use IO::Socket::INET;
print STDERR "uid $<";
my $s = IO::Socket::INET->new(PeerAddr => $ARGV[0]) or die "connect $ARGV[0]: $!\n";
binmode STDIN; binmode STDOUT; binmode $s;
local $/;
my $request = <STDIN>;
print $s $request;
my $answer = <$s>;
print $answer;
"#;

/// One request to `ui` sent by uid 65534, with `headers` and a JSON `body`; its answer.
fn as_nobody(
    ui: &KresctlUi,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> HttpResponse {
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n",
        ui.address,
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    let mut client = Command::new("setpriv")
        .args(AS_NOBODY)
        .args(["perl", "-e", CLIENT, &ui.address])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv perl");
    let mut stdin = client.stdin.take().expect("stdin");
    stdin.write_all(request.as_bytes()).expect("request");
    drop(stdin);
    let out = client.wait_with_output().expect("client ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr == "uid 65534", "{stderr}");
    testbed::http::parse(out.stdout).expect("an HTTP answer")
}

/// A refusal of kresctl ui for want of the secret.
fn assert_refused(answer: &HttpResponse, what: &str) {
    assert_eq!(answer.status, 403, "{what}: {}", answer.text());
    assert_eq!(
        answer.header("x-kresctl-ui"),
        Some("secret-needed"),
        "{what}"
    );
    assert!(
        answer.text().contains("secret"),
        "{what}: {}",
        answer.text()
    );
    assert_eq!(answer.header("set-cookie"), None, "{what}");
}

#[test]
fn another_user_needs_the_secret_of_the_url_kresctl_printed() {
    let r = common::start(&Setup::new("kresctl-ui")).expect("start");
    let etag = r.etag();
    let running = r.http("GET", "/v1/config", b"").expect("config").text();
    let ui = serve_ui(&r);

    // The page's files hold no data: they pass.
    let page = as_nobody(&ui, "GET", "/ui", &[], "");
    assert_eq!(page.status, 200);
    assert!(
        page.text().contains("<script src=\"/ui/app.js\""),
        "{}",
        page.text()
    );

    // Without the secret, or with a wrong one: refused, before anything reaches the API.
    let changed = running.replace("\"notice\"", "\"debug\"");
    assert_ne!(changed, running, "the change changes the level");
    let port = ui.address.rsplit(':').next().expect("port");
    let wrong_secret = "0".repeat(ui.secret.len());
    // The secret itself, in a cookie: a cookie admits nothing.
    let as_cookie = format!("kresctl-ui-{port}={0}; secret={0}", ui.secret);
    let as_bearer = format!("Bearer {}", ui.secret);
    for (method, path, headers, body) in [
        ("POST", "/stop", vec![], ""),
        ("PUT", "/v1/config", vec![], changed.as_str()),
        ("GET", "/v1/config", vec![], ""),
        ("GET", "/ui/whoami", vec![], ""),
        (
            "POST",
            "/stop",
            vec![("X-Kresctl-Ui-Secret", wrong_secret.as_str())],
            "",
        ),
        (
            "PUT",
            "/v1/config",
            vec![("Cookie", as_cookie.as_str())],
            changed.as_str(),
        ),
        ("POST", "/stop", vec![("Cookie", as_cookie.as_str())], ""),
        (
            "GET",
            "/v1/config",
            vec![("Authorization", as_bearer.as_str())],
            "",
        ),
    ] {
        let answer = as_nobody(&ui, method, path, &headers, body);
        assert_refused(&answer, &format!("{method} {path} {headers:?}"));
    }
    // kresctl itself, pointed at kresctl ui's address.
    let out = Command::new("setpriv")
        .args(AS_NOBODY)
        .arg(KRESCTL)
        .args(["-s", &format!("http://{}", ui.address), "stop"])
        .output()
        .expect("setpriv kresctl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("secret"), "{stderr}");
    // Each refusal was answered before this point: had one reached the API, the resolver
    // would have stopped or changed by now.
    assert!(!r.launched.tree().is_empty(), "the resolver runs");
    assert_eq!(r.etag(), etag, "the configuration is unchanged");

    // With the secret in its header: the configuration is read, then changed.
    let secret = [("X-Kresctl-Ui-Secret", ui.secret.as_str())];
    let read = as_nobody(&ui, "GET", "/v1/config", &secret, "");
    assert_eq!(read.status, 200, "{}", read.text());
    assert_eq!(read.header("etag"), Some(etag.as_str()));
    assert_eq!(read.header("set-cookie"), None, "no cookie, ever");
    let who = as_nobody(&ui, "GET", "/ui/whoami", &secret, "");
    assert_eq!(who.status, 200, "{}", who.text());
    let changed = as_nobody(
        &ui,
        "PUT",
        "/v1/config/logging/level",
        &secret,
        &json!("info").to_string(),
    );
    assert_eq!(changed.status, 200, "{}", changed.text());
    assert_ne!(r.etag(), etag, "changed");
    let level = r
        .http("GET", "/v1/config/logging/level", b"")
        .expect("level")
        .text();
    assert_eq!(level.trim(), "\"info\"");

    drop(ui);
    r.stop();
}
