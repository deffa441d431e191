//! Subscribed lists end to end: our resolver on real kresd fetching lists of every format
//! from an HTTP server written here (loopback only, ETag and Last-Modified, misbehaving on
//! command), blocking what they list, allowing what an allowlist lists, answering 304s with
//! no policy-loader run, and keeping the version in force against hostile sources. Every
//! step waits for what it caused: `POST /rpz/lists/refresh` answers once the fetch is done
//! and what it brought is in force.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use common::{Asker, Resolver, Setup, DNS_TIMEOUT};
use serde_json::Value;
use testbed::dns;

/// What the server does for a path.
#[derive(Clone, Debug, PartialEq)]
enum Behaviour {
    /// 200 with the body, its ETag and Last-Modified; 304 when the client has that ETag.
    Serve,
    /// 200 with an HTML error page.
    Html,
    /// 200 with a Content-Length, then half the body and the connection closed.
    Cut,
    /// 200 and a body that never ends.
    Endless,
    /// 302 to itself.
    RedirectLoop,
}

/// One list the server serves.
#[derive(Clone, Debug)]
struct Served {
    /// The list's text.
    body: String,
    /// Its ETag (a new one with every new body).
    etag: String,
    /// What the server does when asked for it.
    behaviour: Behaviour,
}

/// The lists by path, and every answer given: (path, status).
#[derive(Default)]
struct ServerState {
    /// The lists, by path.
    lists: HashMap<String, Served>,
    /// Every answer given, in order: what the tests count requests and 304s by.
    answers: Vec<(String, u16)>,
}

/// A small HTTP/1.1 server on loopback, one thread per connection, one answer per
/// connection.
#[derive(Clone)]
struct ListServer {
    /// Where it listens (loopback, a free port).
    addr: SocketAddr,
    /// What it serves and what it answered, shared with its threads.
    state: Arc<Mutex<ServerState>>,
}

impl ListServer {
    fn start() -> ListServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(Mutex::new(ServerState::default()));
        let server = ListServer { addr, state };
        let serving = server.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let serving = serving.clone();
                std::thread::spawn(move || serving.answer(stream));
            }
        });
        server
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Serve `body` at `path` with a new ETag.
    fn set(&self, path: &str, body: &str) {
        let mut state = self.state.lock().expect("state");
        let version = state.lists.len() + state.answers.len();
        state.lists.insert(
            path.to_owned(),
            Served {
                body: body.to_owned(),
                etag: format!("\"v{version}-{}\"", body.len()),
                behaviour: Behaviour::Serve,
            },
        );
    }

    fn behave(&self, path: &str, behaviour: Behaviour) {
        let mut state = self.state.lock().expect("state");
        if let Some(list) = state.lists.get_mut(path) {
            list.behaviour = behaviour;
        }
    }

    /// The statuses answered for `path`, in order.
    fn answers(&self, path: &str) -> Vec<u16> {
        let state = self.state.lock().expect("state");
        state
            .answers
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, s)| *s)
            .collect()
    }

    fn answer(&self, mut stream: TcpStream) {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && head.len() < 16384 {
            match stream.read(&mut byte) {
                Ok(1) => head.push(byte[0]),
                _ => return,
            }
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let path = head
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        let if_none_match = head.lines().find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("if-none-match")
                .then(|| value.trim().to_owned())
        });
        let served = self.state.lock().expect("state").lists.get(&path).cloned();
        let status = match &served {
            None => 404,
            Some(s) if s.behaviour == Behaviour::RedirectLoop => 302,
            Some(s)
                if s.behaviour == Behaviour::Serve && if_none_match.as_ref() == Some(&s.etag) =>
            {
                304
            }
            Some(_) => 200,
        };
        self.state
            .lock()
            .expect("state")
            .answers
            .push((path.clone(), status));
        let Some(served) = served else {
            let _ = stream.write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            return;
        };
        let validators = format!(
            "ETag: {}\r\nLast-Modified: Sun, 06 Dec 2026 12:00:00 GMT\r\n",
            served.etag
        );
        let _ = match (served.behaviour, status) {
            (_, 304) => stream.write_all(
                format!("HTTP/1.1 304 Not Modified\r\n{validators}Connection: close\r\n\r\n").as_bytes(),
            ),
            (Behaviour::Serve, _) => stream.write_all(
                format!(
                    "HTTP/1.1 200 OK\r\n{validators}Content-Length: {}\r\nConnection: close\r\n\r\n{}",
                    served.body.len(),
                    served.body
                )
                .as_bytes(),
            ),
            (Behaviour::Html, _) => {
                let page = "<!DOCTYPE html>\n<html><body><h1>503 Service Unavailable</h1></body></html>\n";
                stream.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                        page.len()
                    )
                    .as_bytes(),
                )
            }
            (Behaviour::Cut, _) => stream.write_all(
                format!(
                    "HTTP/1.1 200 OK\r\n{validators}Content-Length: {}\r\nConnection: close\r\n\r\n{}",
                    served.body.len(),
                    &served.body[..served.body.len() / 2]
                )
                .as_bytes(),
            ),
            (Behaviour::Endless, _) => {
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
                let line = "endless.blocked-by-list.net\n".repeat(1000);
                // until the client hangs up
                while stream.write_all(line.as_bytes()).is_ok() {}
                Ok(())
            }
            (Behaviour::RedirectLoop, _) => stream.write_all(
                format!("HTTP/1.1 302 Found\r\nLocation: {path}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            ),
        };
    }
}

/// The rcode and the A records of `name` (absolute); no answer in time (the bed has no
/// network) is rcode 255, which is no NXDOMAIN either.
fn ask(r: &Resolver, name: &str) -> (u8, Vec<std::net::Ipv4Addr>) {
    dns::query_udp(r.dns(), name, dns::TYPE_A, DNS_TIMEOUT)
        .map_or((u8::MAX, Vec::new()), |answer| (answer.rcode, answer.a()))
}

const NXDOMAIN: u8 = dns::RCODE_NXDOMAIN;

/// `POST /rpz/lists/refresh` (of `name`, or all): the lists once done.
fn refresh(r: &Resolver, name: Option<&str>) -> Vec<Value> {
    let path = match name {
        Some(name) => format!("/rpz/lists/refresh?name={name}"),
        None => "/rpz/lists/refresh".to_owned(),
    };
    let answer = r.http("POST", &path, b"").expect("refresh");
    assert_eq!(answer.status, 200, "{}", answer.text());
    serde_json::from_slice::<Value>(&answer.body)
        .expect("JSON")
        .as_array()
        .cloned()
        .expect("lists")
}

/// The list `name` among `lists`.
fn list<'a>(lists: &'a [Value], name: &str) -> &'a Value {
    lists
        .iter()
        .find(|l| l["name"] == name)
        .unwrap_or_else(|| panic!("no list {name}: {lists:?}"))
}

/// `GET /rpz/check?name=`.
fn check(r: &Resolver, name: &str) -> Value {
    let answer = r
        .http("GET", &format!("/rpz/check?name={name}"), b"")
        .expect("check");
    assert_eq!(answer.status, 200, "{}", answer.text());
    serde_json::from_slice(&answer.body).expect("JSON")
}

/// The value of `series` in `/metrics/prometheus` (0 when absent).
fn sample(r: &Resolver, series: &str) -> f64 {
    let text = r
        .http("GET", "/metrics/prometheus", b"")
        .expect("metrics")
        .text();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// A `local-data.rpz` entry subscribing to `url` into `file`, with `extra` keys.
fn entry(file: &std::path::Path, url: &str, extra: &str) -> String {
    format!("    - file: {}\n      url: {url}\n{extra}", file.display())
}

#[test]
fn four_formats_and_an_allowlist_block_allow_and_refresh_conditionally() {
    let bed = testbed::Bed::get().expect("bed");
    let dir = bed.test_dir("rpz-lists-formats-files").expect("dir");
    let server = ListServer::start();
    server.set(
        "/hosts.txt",
        "# hosts\n127.0.0.1 localhost\n0.0.0.0 hosts.blocked-by-list.net\n0.0.0.0 both.blocked-by-list.net\n",
    );
    server.set("/domains.txt", "domains.blocked-by-list.net\n");
    server.set(
        "/adblock.txt",
        "[Adblock Plus 2.0]\n! a comment\n||adblock.blocked-by-list.net^\n##.banner\n",
    );
    server.set(
        "/feed.rpz",
        "$TTL 300\n@ SOA localhost. root.localhost. 1 3600 600 86400 300\n  NS localhost.\nrpz.blocked-by-list.net CNAME .\n",
    );
    server.set("/allow.txt", "both.blocked-by-list.net\n");
    let file = |name: &str| dir.join(name).1;
    let rpz = [
        entry(
            &file("hosts.rpz"),
            &server.url("/hosts.txt"),
            "      format: hosts\n",
        ),
        entry(
            &file("domains.rpz"),
            &server.url("/domains.txt"),
            "      format: domains\n      action-override: nodata\n",
        ),
        entry(
            &file("adblock.rpz"),
            &server.url("/adblock.txt"),
            "      format: adblock\n",
        ),
        entry(
            &file("feed.rpz"),
            &server.url("/feed.rpz"),
            "      format: rpz\n",
        ),
        entry(
            &file("allow.rpz"),
            &server.url("/allow.txt"),
            "      format: domains\n      action-override: passthru\n",
        ),
    ];
    // Names resolve, where no list decides, through a resolver of ours that has them as
    // local data (a name's local data would win over RPZ in the resolver under test).
    let names = [
        "hosts",
        "domains",
        "adblock",
        "sub.adblock",
        "rpz",
        "both",
        "unlisted",
        "new",
    ];
    let addresses: String = names
        .iter()
        .map(|n| format!("    {n}.blocked-by-list.net: 192.0.2.2\n"))
        .collect();
    let origin = common::start(
        &Setup::new("rpz-lists-origin").extra(&format!("local-data:\n  addresses:\n{addresses}")),
    )
    .expect("the origin starts");
    let forward = format!(
        "forward:\n  - subtree: blocked-by-list.net\n    servers: ['127.0.0.1@{}']\n    options: {{authoritative: false, dnssec: false}}\n",
        origin.port
    );
    let setup = Setup::new("rpz-lists-formats")
        .workers(2)
        .extra(&format!("{forward}local-data:\n  rpz:\n{}", rpz.concat()));
    let r = common::start(&setup).expect("start");

    // The first fetches start with the manager; a refresh of all answers once they are done
    // and in force.
    let lists = refresh(&r, None);
    for name in ["hosts", "domains", "adblock", "feed", "allow"] {
        let l = list(&lists, name);
        assert!(
            l["result"] == "changed" || l["result"] == "unchanged",
            "{l}\n{}",
            r.launched.output.text()
        );
    }
    assert_eq!(list(&lists, "hosts")["entries"], 2, "localhost is no entry");
    assert_eq!(list(&lists, "adblock")["skipped"], 1, "the element rule");
    assert_eq!(ask(&r, "hosts.blocked-by-list.net.").0, NXDOMAIN);
    let (rcode, a) = ask(&r, "domains.blocked-by-list.net.");
    assert_eq!((rcode, a.len()), (0, 0), "nodata: NOERROR, no answer");
    assert_eq!(ask(&r, "adblock.blocked-by-list.net.").0, NXDOMAIN);
    assert_eq!(
        ask(&r, "sub.adblock.blocked-by-list.net.").0,
        NXDOMAIN,
        "||name^ covers the names under it"
    );
    assert_eq!(ask(&r, "rpz.blocked-by-list.net.").0, NXDOMAIN);
    assert_eq!(
        ask(&r, "both.blocked-by-list.net."),
        (0, vec!["192.0.2.2".parse().expect("ip")]),
        "listed by hosts, allowed by the allowlist: resolves normally"
    );
    assert_eq!(
        ask(&r, "unlisted.blocked-by-list.net."),
        (0, vec!["192.0.2.2".parse().expect("ip")])
    );

    let decided = check(&r, "hosts.blocked-by-list.net");
    assert_eq!(
        (&decided["list"], &decided["action"]),
        (&"hosts".into(), &"nxdomain".into()),
        "{decided}"
    );
    let decided = check(&r, "both.blocked-by-list.net");
    assert_eq!(
        (&decided["list"], &decided["action"]),
        (&"allow".into(), &"passthru".into()),
        "{decided}"
    );
    assert_eq!(
        decided["overridden"],
        serde_json::json!(["hosts"]),
        "{decided}"
    );
    let decided = check(&r, "unlisted.blocked-by-list.net");
    assert!(decided["list"].is_null(), "{decided}");
    let text = r
        .kresctl(&["rpz", "check", "both.blocked-by-list.net"])
        .expect("kresctl");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("allowed by the allowlist allow"), "{text}");

    let text = r
        .kresctl(&["rpz", "check", "hosts.blocked-by-list.net", "127.0.0.1"])
        .expect("kresctl");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("nxdomain by the list hosts (entry hosts.blocked-by-list.net)"),
        "{text}"
    );
    assert!(
        text.contains("  for client 127.0.0.1 (tags: none)"),
        "{text}"
    );

    // Unchanged: one request, answered 304, and no policy-loader run.
    let runs = sample(&r, "knot_resolver_policy_loader_duration_seconds_count");
    let before = server.answers("/hosts.txt").len();
    let lists = refresh(&r, Some("hosts"));
    assert_eq!(list(&lists, "hosts")["result"], "unchanged");
    assert_eq!(server.answers("/hosts.txt")[before..], [304]);
    assert_eq!(
        sample(&r, "knot_resolver_policy_loader_duration_seconds_count"),
        runs,
        "no policy-loader run for an unchanged list"
    );

    // Changed: in force once the refresh answers.
    server.set(
        "/hosts.txt",
        "0.0.0.0 hosts.blocked-by-list.net\n0.0.0.0 both.blocked-by-list.net\n0.0.0.0 new.blocked-by-list.net\n",
    );
    let out = r.kresctl(&["rpz", "refresh", "hosts"]).expect("kresctl");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains(" ago: changed\n"), "{text}");
    assert!(
        text.contains("  entries:      3 (0 lines skipped)"),
        "{text}"
    );
    assert_eq!(ask(&r, "new.blocked-by-list.net.").0, NXDOMAIN);
    assert!(sample(&r, "knot_resolver_policy_loader_duration_seconds_count") > runs);

    // Two lists changed and refreshed together: one policy-loader run for both.
    server.set(
        "/domains.txt",
        "domains.blocked-by-list.net\nnew.blocked-by-list.net\n",
    );
    server.set(
        "/adblock.txt",
        "||adblock.blocked-by-list.net^\n||new.blocked-by-list.net^\n",
    );
    let runs = sample(&r, "knot_resolver_policy_loader_duration_seconds_count");
    let lists = refresh(&r, None);
    assert_eq!(list(&lists, "domains")["result"], "changed");
    assert_eq!(list(&lists, "adblock")["result"], "changed");
    assert_eq!(list(&lists, "hosts")["result"], "unchanged");
    assert_eq!(
        sample(&r, "knot_resolver_policy_loader_duration_seconds_count"),
        runs + 1.0,
        "the refreshes are coalesced into one policy-loader run"
    );
    assert_eq!(
        sample(&r, "knot_resolver_rpz_list_entries{list=\"hosts\"}"),
        3.0
    );
    assert_eq!(
        sample(&r, "knot_resolver_rpz_list_entries{list=\"adblock\"}"),
        4.0
    );
    assert!(
        sample(
            &r,
            "knot_resolver_rpz_list_fetches_total{list=\"hosts\",result=\"unchanged\"}"
        ) >= 2.0
    );

    let text = r.kresctl(&["rpz"]).expect("kresctl rpz");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("hosts  hosts list"), "{text}");
    assert!(
        text.contains(&format!("  url:          {}", server.url("/hosts.txt"))),
        "{text}"
    );
    assert!(
        text.contains("  entries:      3 (0 lines skipped)"),
        "{text}"
    );
    assert!(text.contains("allow  allowlist"), "{text}");
    r.stop();
    origin.stop();
}

#[test]
fn a_changed_list_is_in_force_after_its_refresh_time_without_being_asked() {
    let bed = testbed::Bed::get().expect("bed");
    let dir = bed.test_dir("rpz-lists-timer-files").expect("dir");
    let server = ListServer::start();
    server.set("/timed.txt", "timed.blocked-by-list.net\n");
    let rpz = entry(
        &dir.join("timed.rpz").1,
        &server.url("/timed.txt"),
        "      format: domains\n      refresh: 2s\n",
    );
    let r =
        common::start(&Setup::new("rpz-lists-timer").extra(&format!("local-data:\n  rpz:\n{rpz}")))
            .expect("start");
    let lists = refresh(&r, None);
    assert_eq!(list(&lists, "timed")["entries"], 1, "{lists:?}");
    assert_eq!(ask(&r, "timed.blocked-by-list.net.").0, NXDOMAIN);
    assert_ne!(ask(&r, "later.blocked-by-list.net.").0, NXDOMAIN);
    let fetched = server.answers("/timed.txt").len();
    // Changed at the server; nobody asks for a refresh: its timer fetches it.
    server.set(
        "/timed.txt",
        "timed.blocked-by-list.net\nlater.blocked-by-list.net\n",
    );
    testbed::wait_for(
        "the change in force by the list's timer",
        std::time::Duration::from_secs(30),
        || Ok((ask(&r, "later.blocked-by-list.net.").0 == NXDOMAIN).then_some(())),
    )
    .expect("in force");
    assert!(
        server.answers("/timed.txt").len() > fetched,
        "fetched again by the timer"
    );
    // The status page shows the list as it is in force, nothing failing in the page.
    let ui = common::serve_ui(&r);
    let browser = testbed::webdriver::Browser::start(&r.dir.host("browser")).expect("browser");
    browser.open(&ui.url).expect("page");
    let row = browser
        .wait_until(
            "the list on the status page",
            std::time::Duration::from_secs(30),
            "const r = document.querySelector('#rpz-lists tr[data-list=\"timed\"]'); \
             return r && r.children[1].textContent === '2' \
               ? Array.from(r.children).map((c) => c.textContent) : null;",
        )
        .expect("shown");
    assert!(
        row[3]
            .as_str()
            .is_some_and(|t| t.starts_with("changed at ") || t.starts_with("unchanged at ")),
        "{row}"
    );
    assert_eq!(
        browser.console_errors().expect("console"),
        Vec::<String>::new()
    );
    drop(browser);
    drop(ui);
    r.stop();
}

#[test]
fn hostile_sources_keep_the_version_in_force_and_are_reported() {
    let bed = testbed::Bed::get().expect("bed");
    let dir = bed.test_dir("rpz-lists-hostile-files").expect("dir");
    let server = ListServer::start();
    let names: String = (0..20)
        .map(|i| format!("n{i}.blocked-by-list.net\n"))
        .collect();
    server.set("/feed.txt", &names);
    let pinned_body = "pinned.blocked-by-list.net\n";
    let pin: String = ring::digest::digest(&ring::digest::SHA256, pinned_body.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    server.set("/pinned.txt", pinned_body);
    let rpz = [
        entry(
            &dir.join("feed.rpz").1,
            &server.url("/feed.txt"),
            "      format: domains\n      max-size: 64K\n",
        ),
        entry(
            &dir.join("pinned.rpz").1,
            &server.url("/pinned.txt"),
            &format!("      format: domains\n      sha256: {pin}\n"),
        ),
    ];
    let setup = Setup::new("rpz-lists-hostile").extra(&format!(
        "local-data:\n  addresses:\n    unlisted.blocked-by-list.net: 192.0.2.3\n  rpz:\n{}",
        rpz.concat()
    ));
    let r = common::start(&setup).expect("start");
    let lists = refresh(&r, None);
    assert_eq!(list(&lists, "feed")["entries"], 20, "{lists:?}");
    assert_eq!(list(&lists, "pinned")["entries"], 1, "{lists:?}");
    assert_eq!(ask(&r, "n7.blocked-by-list.net.").0, NXDOMAIN);
    let asker = Asker::start(&r, "unlisted.blocked-by-list.net.");

    let hostile = |behaviour: Behaviour, expected: &str| {
        server.behave("/feed.txt", behaviour.clone());
        let lists = refresh(&r, Some("feed"));
        let feed = list(&lists, "feed");
        assert_eq!(feed["result"], expected, "{behaviour:?}: {feed}");
        assert!(feed["error"].is_string(), "{feed}");
        assert_eq!(feed["entries"], 20, "{behaviour:?}: the version in force");
        assert_eq!(
            ask(&r, "n7.blocked-by-list.net.").0,
            NXDOMAIN,
            "{behaviour:?}: still blocked"
        );
    };
    hostile(Behaviour::Html, "html");
    hostile(Behaviour::Cut, "network");
    hostile(Behaviour::Endless, "too-large");
    hostile(Behaviour::RedirectLoop, "redirects");
    server.set(
        "/feed.txt",
        "n1.blocked-by-list.net\nn2.blocked-by-list.net\n",
    );
    hostile(Behaviour::Serve, "shrank");
    server.set(
        "/pinned.txt",
        "pinned.blocked-by-list.net\nother.blocked-by-list.net\n",
    );
    let lists = refresh(&r, Some("pinned"));
    let pinned = list(&lists, "pinned");
    assert_eq!(pinned["result"], "sha256", "{pinned}");
    assert_eq!(pinned["entries"], 1);
    assert_eq!(ask(&r, "pinned.blocked-by-list.net.").0, NXDOMAIN);
    assert_ne!(
        ask(&r, "other.blocked-by-list.net.").0,
        NXDOMAIN,
        "not taken"
    );

    let failures = sample(
        &r,
        "knot_resolver_rpz_list_fetches_total{list=\"feed\",result=\"html\"}",
    );
    assert_eq!(failures, 1.0);
    let (answered, failed) = asker.finish();
    assert!(answered > 0);
    assert_eq!(failed, 0, "DNS answered throughout");
    let text = r.kresctl(&["rpz"]).expect("kresctl rpz");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("shrank: it shrank from 20 to 2 entries"),
        "{text}"
    );
    r.stop();
}

/// A memory figure of `/proc/PID/status` (`VmRSS:`, `VmHWM:`), in KiB.
fn memory_kib(pid: i32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a memory figure")
}

#[test]
fn a_large_list_is_compiled_without_the_manager_holding_it() {
    let bed = testbed::Bed::get().expect("bed");
    let dir = bed.test_dir("rpz-lists-large-files").expect("dir");
    let server = ListServer::start();
    server.set("/large.txt", "n0.blocked-by-list.net\n");
    let rpz = entry(
        &dir.join("large.rpz").1,
        &server.url("/large.txt"),
        "      format: domains\n",
    );
    let setup = Setup::new("rpz-lists-large").extra(&format!("local-data:\n  rpz:\n{rpz}"));
    let r = common::start(&setup).expect("start");
    refresh(&r, None);
    let manager = *r.pids_named("kres-manager").first().expect("the manager");
    let before = memory_kib(manager, "VmHWM:").max(memory_kib(manager, "VmRSS:"));
    // 500,000 entries, 13 MB: a manager holding the list would grow by more than that.
    const ENTRIES: usize = 500_000;
    let body: String = (0..ENTRIES)
        .map(|i| format!("n{i}.blocked-by-list.net\n"))
        .collect();
    server.set("/large.txt", &body);
    let lists = refresh(&r, Some("large"));
    assert_eq!(
        list(&lists, "large")["entries"],
        ENTRIES as u64,
        "{lists:?}"
    );
    assert_eq!(ask(&r, "n499999.blocked-by-list.net.").0, NXDOMAIN);
    let peak = memory_kib(manager, "VmHWM:");
    eprintln!(
        "{ENTRIES} entries ({} bytes): manager peak {before} KiB -> {peak} KiB",
        body.len()
    );
    assert!(
        peak < before + 8 * 1024,
        "the manager's peak memory grew from {before} KiB to {peak} KiB over a {}-byte list",
        body.len()
    );
    r.stop();
}

#[test]
fn an_allowlist_stored_after_a_blocklist_was_compiled_is_subtracted_at_the_next_start() {
    let bed = testbed::Bed::get().expect("bed");
    let dir = bed.test_dir("rpz-lists-restart-files").expect("dir");
    let server = ListServer::start();
    server.set(
        "/block.txt",
        "a.blocked-by-list.net\nb.blocked-by-list.net\n",
    );
    server.set("/allow.txt", "x.unlisted-elsewhere.net\n");
    let (allow_host, allow_bed) = dir.join("allow.rpz");
    let rpz = [
        entry(
            &dir.join("block.rpz").1,
            &server.url("/block.txt"),
            "      format: domains\n",
        ),
        entry(
            &allow_bed,
            &server.url("/allow.txt"),
            "      format: domains\n      action-override: passthru\n",
        ),
    ];
    let setup =
        Setup::new("rpz-lists-restart").extra(&format!("local-data:\n  rpz:\n{}", rpz.concat()));
    let r = common::start(&setup).expect("start");
    refresh(&r, None);
    assert_eq!(ask(&r, "a.blocked-by-list.net.").0, NXDOMAIN);
    r.stop();
    // As if the manager had stopped between storing a new allowlist and compiling the
    // blocklist less it: the allowlist's body and zone are newer than the blocklist's zone.
    std::fs::write(
        allow_host.with_file_name("allow.rpz.source"),
        "a.blocked-by-list.net\n",
    )
    .expect("source");
    std::fs::write(
        &allow_host,
        "list.rpz. 60 IN SOA localhost. nobody.invalid. 1 86400 3600 604800 60\na.blocked-by-list.net.list.rpz. 60 IN CNAME rpz-passthru.\n",
    )
    .expect("zone");
    let requests = server.answers("/block.txt").len();
    let r = common::start(&setup).expect("start again");
    // The task answers once it has compiled the blocklist again and renewed (no list is due:
    // nothing is fetched).
    let decided = check(&r, "a.blocked-by-list.net");
    assert_eq!(decided["list"], "allow", "{decided}");
    assert_eq!(server.answers("/block.txt").len(), requests, "no fetch");
    assert_ne!(ask(&r, "a.blocked-by-list.net.").0, NXDOMAIN, "allowed now");
    assert_eq!(ask(&r, "b.blocked-by-list.net.").0, NXDOMAIN);
    r.stop();
}

#[test]
fn an_https_list_from_a_certificate_the_system_does_not_trust_is_refused() {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let dir = std::env::temp_dir().join(format!("rpz-lists-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let (cert, key) = (dir.join("server.pem"), dir.join("server.key"));
    testbed::self_signed_cert("127.0.0.1", &cert, &key).expect("a certificate");
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert)
        .expect("PEM")
        .collect::<Result<_, _>>()
        .expect("certificates");
    let key = PrivateKeyDer::from_pem_file(&key).expect("a key");
    // ring's provider, as the client's (rustls deprecates it for its lack of post-quantum
    // key exchange).
    #[allow(deprecated)]
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("a server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let list = kres_daemon::rpz::lists::List {
        name: "tls".into(),
        url: String::new(),
        file: dir.join("tls.rpz"),
        format: kres_config::ListFormat::Domains,
        action: None,
        refresh: std::time::Duration::from_secs(3600),
        sha256: None,
        limits: kres_daemon::rpz::lists::FetchLimits::default(),
        tags: None,
    };
    let (handshakes, error) = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        // The server's side of the handshake: it ends when the client refuses the certificate.
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.expect("a connection");
            acceptor.accept(tcp).await.is_ok()
        });
        let list = kres_daemon::rpz::lists::List {
            url: format!("https://127.0.0.1:{port}/list.txt"),
            ..list
        };
        let allow = std::sync::Arc::new(kres_daemon::rpz::lists::store::AllowSet::default());
        let error = kres_daemon::rpz::lists::refresh(&list, allow)
            .await
            .expect_err("refused");
        (server.await.expect("the server"), error)
    });
    assert!(!handshakes, "no TLS session was made");
    assert_eq!(error.reason(), "connect", "{error}");
    let text = error.to_string();
    assert!(text.contains("TLS with 127.0.0.1"), "{text}");
    assert!(text.contains("certificate"), "{text}");
    assert!(!dir.join("tls.rpz").exists(), "nothing stored");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
