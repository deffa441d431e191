//! Clients that misbehave against the real daemon: a client that never reads its answer, a
//! flood of connections, requests over TCP with a foreign `Host` or `Origin` or without the
//! bearer token. The resolver keeps answering DNS, the root stays small, and a stop is never
//! held up by a client. Thousands of idle, half-sent or refused connections keep no probe
//! and no admin out, and one peer cannot take every place from another.

mod common;

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{Setup, DNS_TIMEOUT, STOP_TIMEOUT};
use nix::sys::signal::Signal;
use testbed::dns;

/// The root process's own memory (anonymous: heap and stacks; its program text, given back at
/// READY, maps again as code runs) may not grow by more than this under hostile clients (the
/// root parses no request: it grows only by what its own work takes).
const ROOT_RSS_GROWTH_KIB: u64 = 4 * 1024;

/// One raw HTTP/1.1 exchange over TCP; the status code.
fn tcp_status(port: u16, head: &str) -> u16 {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(DNS_TIMEOUT * 6)).expect("timeout");
    s.write_all(head.as_bytes()).expect("write");
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"))
}

#[test]
fn tcp_requests_need_our_host_our_origin_and_the_token() {
    let port = testbed::free_port().expect("port");
    let bed = testbed::Bed::get().expect("bed");
    let token_dir = bed.test_dir("api-token").expect("dir");
    let token_file = token_dir.host("token");
    testbed::write(&token_file, "s3cret-token\n").expect("token");
    let r = common::start(
        &Setup::new("hostile-tcp")
            .management(&format!("  interface: 127.0.0.1@{port}\n"))
            .env(
                kres_daemon::api::guard::TOKEN_FILE_VAR,
                token_dir.bed("token").to_str().expect("UTF-8"),
            ),
    )
    .expect("start");
    let get = |host: &str, extra: &str| {
        tcp_status(
            port,
            &format!("GET /v1/config HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{extra}\r\n"),
        )
    };
    let auth = "Authorization: Bearer s3cret-token\r\n";
    assert_eq!(get(&format!("127.0.0.1:{port}"), auth), 200);
    assert_eq!(get(&format!("localhost:{port}"), auth), 200);
    assert_eq!(get(&format!("127.0.0.1:{port}"), ""), 401, "no token");
    assert_eq!(
        get(
            &format!("127.0.0.1:{port}"),
            "Authorization: Bearer wrong\r\n"
        ),
        401
    );
    assert_eq!(
        get(&format!("rebound.example:{port}"), auth),
        421,
        "DNS rebinding"
    );
    assert_eq!(
        get(
            &format!("127.0.0.1:{port}"),
            &format!("{auth}Origin: http://evil.example\r\n")
        ),
        403,
        "cross-site"
    );
    // Our kresctl sends the token from the same variable.
    let url = format!("http://127.0.0.1:{port}");
    let out = std::process::Command::new(common::KRESCTL)
        .args(["-s", &url, "pids", "kresd"])
        .env(kres_daemon::api::guard::TOKEN_FILE_VAR, &token_file)
        .output()
        .expect("kresctl");
    assert!(out.status.success(), "{out:?}");
    let out = std::process::Command::new(common::KRESCTL)
        .args(["-s", &url, "pids", "kresd"])
        .output()
        .expect("kresctl");
    assert!(!out.status.success(), "refused without the token");
    assert!(
        r.launched
            .output
            .count("refused: a valid bearer token is required")
            >= 2
    );
    r.stop();
}

/// On a wildcard endpoint without tokens (every address of the host reaches the API), a page
/// at another address (`http://198.51.100.7`), or on the default port of a loopback address
/// (`http://127.0.0.1`), sends `POST /stop` as a browser would: refused, and the resolver
/// keeps answering. A form post without an `Origin` (older browsers) is refused too; a
/// client that is no browser (kresctl's requests) still stops it.
#[test]
fn pages_of_other_origins_cannot_stop_a_resolver_on_a_wildcard_endpoint() {
    let port = testbed::free_wildcard_port().expect("port");
    let mut r = common::start(
        &Setup::new("hostile-origin")
            .management(&format!("  interface: 0.0.0.0@{port}\n"))
            .extra("local-data:\n  records: |\n    origin.test. 300 A 192.0.2.1\n"),
    )
    .expect("start");
    let stop = |extra: &str| {
        tcp_status(
            port,
            &format!(
                "POST /stop HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\
                 Content-Length: 0\r\n{extra}\r\n"
            ),
        )
    };
    for extra in [
        "Origin: http://198.51.100.7\r\n",
        "Origin: http://127.0.0.1\r\n",
        &format!("Origin: http://198.51.100.7:{port}\r\n"),
        "Sec-Fetch-Site: cross-site\r\n",
        "Content-Type: application/x-www-form-urlencoded\r\n",
    ] {
        assert_eq!(stop(extra), 403, "{extra}");
        let answer = dns::query_udp(r.dns(), "origin.test.", dns::TYPE_A, DNS_TIMEOUT)
            .unwrap_or_else(|e| panic!("no answer after {extra}: {e}"));
        assert_eq!(answer.a().len(), 1, "{extra}");
    }
    assert_eq!(
        r.launched.output.count("cross-origin requests are refused"),
        3,
        "{}",
        r.launched.output.text()
    );
    // The same request from no browser, or from the API's own origin, is the operator's.
    assert_eq!(stop(&format!("Origin: http://127.0.0.1:{port}\r\n")), 200);
    let status = r.launched.wait(STOP_TIMEOUT).expect("stops");
    assert_eq!(status.code(), Some(0));
}

#[test]
fn a_client_that_never_reads_does_not_hold_up_the_stop() {
    // A large configuration, asked for and never read.
    let records: String = (0..20_000)
        .map(|i| format!("    r{i}.test. 300 A 192.0.2.{}\n", i % 250 + 1))
        .collect();
    let mut r = common::start(
        &Setup::new("hostile-nonreader").extra(&format!("local-data:\n  records: |\n{records}")),
    )
    .expect("start");
    let mut clients = Vec::new();
    for _ in 0..4 {
        let mut s = std::os::unix::net::UnixStream::connect(&r.api).expect("connect");
        s.write_all(b"GET /v1/config HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .expect("write");
        clients.push(s);
    }
    // The answers are being written (and not read) when the stop comes.
    let resp = dns::query_udp(r.dns(), "r7.test.", dns::TYPE_A, DNS_TIMEOUT).expect("DNS");
    assert_eq!(resp.a().len(), 1);
    r.launched.signal(Signal::SIGINT).expect("signal");
    let status = r
        .launched
        .wait(STOP_TIMEOUT)
        .expect("stops although nobody reads");
    assert_eq!(status.code(), Some(0), "{}", r.launched.output.text());
    assert!(r.launched.tree().is_empty());
    drop(clients);
}

#[test]
fn a_connection_flood_leaves_dns_and_the_root_alone() {
    let r = common::start(
        &Setup::new("hostile-flood")
            .extra("local-data:\n  records: |\n    alive.test. 300 A 192.0.2.9\n"),
    )
    .expect("start");
    let root = r.launched.pid();
    let root_before = testbed::procs::anonymous_kib(root).expect("root memory");
    let workers = r.pids_named("kresd");
    let mut flood = Vec::new();
    for _ in 0..2000 {
        match std::os::unix::net::UnixStream::connect(&r.api) {
            Ok(s) => flood.push(s),
            // The backlog is full: the flood is as large as the kernel lets it be.
            Err(_) => break,
        }
    }
    assert!(flood.len() >= 128, "{} connections", flood.len());
    let resp = dns::query_udp(r.dns(), "alive.test.", dns::TYPE_A, DNS_TIMEOUT).expect("DNS");
    assert_eq!(resp.a().len(), 1);
    let rss = testbed::procs::anonymous_kib(root).expect("root memory");
    assert!(
        rss < root_before + ROOT_RSS_GROWTH_KIB,
        "root anonymous memory {rss} KiB, {root_before} KiB before"
    );
    // The manager holds the flood up to its bound of connections, never more.
    for manager in r.pids_named("kres-manager") {
        let fds = testbed::procs::open_descriptors(manager);
        let (soft, _) = testbed::procs::open_files_limit(manager).expect("limits");
        let most = kres_daemon::api::admission::connection_bound(soft)
            + kres_daemon::api::admission::RESERVED_DESCRIPTORS as usize;
        eprintln!("the manager holds {fds} descriptors (at most {most})");
        assert!(fds <= most, "the manager holds {fds} descriptors");
    }
    drop(flood);
    // Once the flood is gone the API answers again.
    let resp = r.http("GET", "/v1/config", b"").expect("API answers");
    assert_eq!(resp.status, 200);
    assert_eq!(r.pids_named("kresd"), workers);
    r.stop();
}

#[test]
fn clients_that_never_finish_their_request_head_leave_room_for_others() {
    let r = common::start(
        &Setup::new("hostile-slow")
            .extra("local-data:\n  records: |\n    alive.test. 300 A 192.0.2.9\n"),
    )
    .expect("start");
    let root_before = testbed::procs::anonymous_kib(r.launched.pid()).expect("root memory");
    let workers = r.pids_named("kresd");
    // Fifty clients that send part of a request head and then nothing.
    let mut slow = Vec::new();
    for _ in 0..50 {
        let mut s = std::os::unix::net::UnixStream::connect(&r.api).expect("connect");
        s.write_all(b"GET /v1/config HTTP/1.1\r\nHo")
            .expect("write");
        slow.push(s);
    }
    // A well-behaved client is answered meanwhile, and DNS too.
    let resp = r.http("GET", "/v1/config", b"").expect("API answers");
    assert_eq!(resp.status, 200);
    let answer = dns::query_udp(r.dns(), "alive.test.", dns::TYPE_A, DNS_TIMEOUT).expect("DNS");
    assert_eq!(answer.a().len(), 1);
    assert_eq!(r.pids_named("kresd"), workers);
    let rss = testbed::procs::anonymous_kib(r.launched.pid()).expect("root memory");
    assert!(
        rss < root_before + ROOT_RSS_GROWTH_KIB,
        "root anonymous memory {rss} KiB, {root_before} KiB before"
    );
    drop(slow);
    r.stop();
}

/// How long a probe (or an admin's request) may take before the test gives up on it: the
/// client's own timeout, generous for a loaded machine; never a performance assertion (the
/// figures are printed).
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a flood may take to be opened in full.
const FLOOD_TIMEOUT: Duration = Duration::from_secs(30);

/// Probes of each kind measured under a flood.
const PROBES: usize = 20;

/// Raise this process's soft descriptor limit to its hard one (floods of thousands).
fn raise_descriptor_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).expect("setrlimit");
}

/// The manager process of `r`, with its descriptor limits printed and checked: it can hold
/// as many descriptors as the hard limit allows.
fn manager_of(r: &common::Resolver) -> i32 {
    let managers = r.pids_named("kres-manager");
    assert_eq!(managers.len(), 1, "{managers:?}");
    let (soft, hard) = testbed::procs::open_files_limit(managers[0]).expect("limits");
    eprintln!(
        "the manager's descriptor limits: soft {soft}, hard {hard}; API connection bound {}",
        kres_daemon::api::admission::connection_bound(soft)
    );
    assert_eq!(
        soft, hard,
        "the manager may open as many descriptors as its hard limit allows"
    );
    managers[0]
}

/// One unix connection, made without waiting on a full backlog: `None` when the backlog is
/// full (the server accepts nothing).
fn try_connect_unix(path: &Path) -> Option<std::os::unix::net::UnixStream> {
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    let fd = socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )
    .expect("socket");
    match connect(fd.as_raw_fd(), &UnixAddr::new(path).expect("address")) {
        Ok(()) => {
            let s = std::os::unix::net::UnixStream::from(fd);
            s.set_nonblocking(false).expect("blocking");
            Some(s)
        }
        Err(nix::errno::Errno::EAGAIN) => None,
        Err(e) => panic!("connect: {e}"),
    }
}

/// `n` connections to the unix socket at `path`, every other one sending half a request
/// head; fewer when the server stops taking them before [`FLOOD_TIMEOUT`].
fn unix_flood(path: &Path, n: usize) -> Vec<std::os::unix::net::UnixStream> {
    let deadline = Instant::now() + FLOOD_TIMEOUT;
    let mut flood = Vec::with_capacity(n);
    while flood.len() < n && Instant::now() < deadline {
        match try_connect_unix(path) {
            Some(mut s) => {
                if flood.len() % 2 == 1 {
                    s.write_all(b"GET /v1/config HTTP/1.1\r\nHo")
                        .expect("write");
                }
                flood.push(s);
            }
            // The backlog is full: wait for the server to take some.
            None => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    flood
}

/// A TCP connection from `source` to `port` on 127.0.0.1, within [`PROBE_TIMEOUT`].
fn connect_tcp_from(source: [u8; 4], port: u16) -> std::io::Result<std::net::TcpStream> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    socket.bind(&std::net::SocketAddr::from((source, 0)).into())?;
    socket.connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)).into(),
        PROBE_TIMEOUT,
    )?;
    Ok(socket.into())
}

/// Send `request` (one whole request) on `stream` and read its answer; its status. The answer
/// must end (the request asks `Connection: close`) within [`PROBE_TIMEOUT`].
fn status_of<S: Read + Write>(mut stream: S, request: &str) -> Result<u16, String> {
    stream
        .write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .map_err(|e| format!("{e} after {answer:?}"))?;
    answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status in {answer:?}"))
}

/// Run `probe` `n` times; every run must succeed. Prints the median and the longest time.
fn measure(what: &str, n: usize, mut probe: impl FnMut() -> Result<(), String>) {
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let began = Instant::now();
        if let Err(e) = probe() {
            panic!("{what} #{i} failed after {:?}: {e}", began.elapsed());
        }
        times.push(began.elapsed());
    }
    times.sort_unstable();
    eprintln!(
        "{what}: {n} probes, median {:?}, max {:?}",
        times[n / 2],
        times[n - 1]
    );
}

/// Run kresctl with `args` and `env`, killed after [`PROBE_TIMEOUT`]; Ok when it exits 0.
fn kresctl(args: &[&str], env: &[(&str, &Path)]) -> Result<(), String> {
    let mut command = std::process::Command::new(common::KRESCTL);
    command
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().map_err(|e| e.to_string())?;
    let deadline = Instant::now() + PROBE_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                let _ = pipe.read_to_string(&mut stderr);
            }
            return match status.success() {
                true => Ok(()),
                false => Err(format!("kresctl {args:?}: {status}: {stderr}")),
            };
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "kresctl {args:?} had no answer within {PROBE_TIMEOUT:?}"
            ));
        }
        // Polling the child's exit, with a deadline.
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn two_thousand_idle_unix_connections_keep_no_probe_or_admin_out() {
    raise_descriptor_limit();
    let r = common::start(&Setup::new("hostile-idle-unix")).expect("start");
    let manager = manager_of(&r);
    let rss_before = testbed::procs::rss_kib(manager).expect("manager RSS");
    let began = Instant::now();
    let flood = unix_flood(&r.api, 2000);
    eprintln!(
        "{} connections opened in {:?}; the manager holds {} descriptors",
        flood.len(),
        began.elapsed(),
        testbed::procs::open_descriptors(manager)
    );
    let api = r.api.to_str().expect("UTF-8");
    measure("GET /livez over the unix socket", PROBES, || {
        let stream = std::os::unix::net::UnixStream::connect(&r.api).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(PROBE_TIMEOUT))
            .map_err(|e| e.to_string())?;
        let status = status_of(
            stream,
            "GET /livez HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        )?;
        (status == 200)
            .then_some(())
            .ok_or(format!("status {status}"))
    });
    measure("kresctl health over the unix socket", PROBES, || {
        kresctl(&["-s", api, "health"], &[])
    });
    kresctl(&["-s", api, "health", "--ready"], &[]).expect("ready");
    kresctl(
        &["-s", api, "config", "set", "-p", "/logging/level", "info"],
        &[],
    )
    .expect("an admin's change");
    eprintln!(
        "probes done {:?} after the flood began; the manager holds {} descriptors, RSS {} KiB \
         ({rss_before} KiB before the flood)",
        began.elapsed(),
        testbed::procs::open_descriptors(manager),
        testbed::procs::rss_kib(manager).expect("manager RSS"),
    );
    assert_eq!(flood.len(), 2000, "the whole flood was taken");
    let level = r.http("GET", "/v1/config/logging/level", b"").expect("API");
    assert_eq!(level.text().trim(), "\"info\"");
    drop(flood);
    r.stop();
}

#[test]
fn two_thousand_tcp_connections_without_the_token_keep_no_probe_or_admin_out() {
    raise_descriptor_limit();
    let port = testbed::free_port().expect("port");
    let bed = testbed::Bed::get().expect("bed");
    let token_dir = bed.test_dir("api-token-flood").expect("dir");
    let token_file = token_dir.host("token");
    testbed::write(&token_file, "s3cret-token\n").expect("token");
    let r = common::start(
        &Setup::new("hostile-idle-tcp")
            .management(&format!("  interface: 127.0.0.1@{port}\n"))
            .env(
                kres_daemon::api::guard::TOKEN_FILE_VAR,
                token_dir.bed("token").to_str().expect("UTF-8"),
            ),
    )
    .expect("start");
    let manager = manager_of(&r);
    // Half of them send nothing; the other half a request without the token (401), never
    // reading the answer.
    let began = Instant::now();
    let mut flood = Vec::new();
    let mut refused = 0;
    for i in 0..2000 {
        let Ok(mut s) = connect_tcp_from([127, 0, 0, 1], port) else {
            break;
        };
        if i % 2 == 1 {
            let request = format!("GET /v1/config HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
            s.write_all(request.as_bytes()).expect("write");
            refused += 1;
        }
        flood.push(s);
    }
    eprintln!(
        "{} connections opened ({refused} sent a request without the token) in {:?}; the \
         manager holds {} descriptors",
        flood.len(),
        began.elapsed(),
        testbed::procs::open_descriptors(manager)
    );
    let url = format!("http://127.0.0.1:{port}");
    let authenticated = format!(
        "GET /livez HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer \
         s3cret-token\r\nConnection: close\r\n\r\n"
    );
    measure("an authenticated GET /livez over TCP", PROBES, || {
        let stream = connect_tcp_from([127, 0, 0, 1], port).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(PROBE_TIMEOUT))
            .map_err(|e| e.to_string())?;
        let status = status_of(stream, &authenticated)?;
        (status == 200)
            .then_some(())
            .ok_or(format!("status {status}"))
    });
    let token_env = [(
        kres_daemon::api::guard::TOKEN_FILE_VAR,
        token_file.as_path(),
    )];
    measure("kresctl health over TCP", PROBES, || {
        kresctl(&["-s", &url, "health"], &token_env)
    });
    kresctl(&["-s", &url, "health", "--ready"], &token_env).expect("ready");
    let change = format!(
        "PUT /v1/config/logging/level HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: \
         Bearer s3cret-token\r\nContent-Type: application/json\r\nContent-Length: 6\r\n\
         Connection: close\r\n\r\n\"info\""
    );
    let stream = connect_tcp_from([127, 0, 0, 1], port).expect("connect");
    stream
        .set_read_timeout(Some(PROBE_TIMEOUT))
        .expect("timeout");
    assert_eq!(status_of(stream, &change), Ok(200), "an admin's change");
    eprintln!(
        "probes done {:?} after the flood began; the manager holds {} descriptors",
        began.elapsed(),
        testbed::procs::open_descriptors(manager)
    );
    assert_eq!(flood.len(), 2000, "the whole flood was taken");
    drop(flood);
    r.stop();
}

#[test]
fn refusals_close_their_connection() {
    let port = testbed::free_port().expect("port");
    let bed = testbed::Bed::get().expect("bed");
    let token_dir = bed.test_dir("api-token-close").expect("dir");
    testbed::write(&token_dir.host("token"), "s3cret-token\n").expect("token");
    let r = common::start(
        &Setup::new("hostile-refusals")
            .management(&format!("  interface: 127.0.0.1@{port}\n"))
            .env(
                kres_daemon::api::guard::TOKEN_FILE_VAR,
                token_dir.bed("token").to_str().expect("UTF-8"),
            ),
    )
    .expect("start");
    let auth = "Authorization: Bearer s3cret-token\r\n";
    let rows: [(u16, String); 4] = [
        (401, format!("Host: 127.0.0.1:{port}\r\n")),
        (
            401,
            format!("Host: 127.0.0.1:{port}\r\nAuthorization: Bearer wrong\r\n"),
        ),
        (421, format!("Host: rebound.example:{port}\r\n{auth}")),
        (
            403,
            format!("Host: 127.0.0.1:{port}\r\n{auth}Origin: http://evil.example\r\n"),
        ),
    ];
    for (status, headers) in rows {
        // Keep-alive is asked for: the server closes anyway, at once (well before the head
        // deadline an idle connection would be closed after).
        let mut s = connect_tcp_from([127, 0, 0, 1], port).expect("connect");
        s.set_read_timeout(Some(kres_daemon::api::server::HEADER_READ_TIMEOUT / 2))
            .expect("timeout");
        s.write_all(format!("GET /v1/config HTTP/1.1\r\n{headers}\r\n").as_bytes())
            .expect("write");
        let mut answer = String::new();
        let read = s.read_to_string(&mut answer);
        assert!(
            read.is_ok(),
            "{status}: not closed: {read:?} after {answer:?}"
        );
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status} ")),
            "{headers:?}: {answer}"
        );
        assert!(
            answer.to_ascii_lowercase().contains("connection: close"),
            "{answer}"
        );
    }
    // An admitted request keeps its connection: a second request on it is answered.
    let mut s = connect_tcp_from([127, 0, 0, 1], port).expect("connect");
    s.set_read_timeout(Some(PROBE_TIMEOUT)).expect("timeout");
    let livez = format!("GET /livez HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}\r\n");
    s.write_all(livez.as_bytes()).expect("write");
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).expect("an answer");
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let last =
        format!("GET /livez HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}Connection: close\r\n\r\n");
    assert_eq!(status_of(s, &last), Ok(200));
    r.stop();
}

#[test]
fn one_address_cannot_take_every_place_from_another() {
    raise_descriptor_limit();
    let port = testbed::free_port().expect("port");
    let r = common::start(
        &Setup::new("hostile-peers").management(&format!("  interface: 127.0.0.1@{port}\n")),
    )
    .expect("start");
    let manager = manager_of(&r);
    let (soft, _) = testbed::procs::open_files_limit(manager).expect("limits");
    let bound = kres_daemon::api::admission::connection_bound(soft);
    // 127.0.0.1 opens a few connections and sends nothing yet.
    let mut ours: Vec<std::net::TcpStream> = (0..20)
        .map(|_| connect_tcp_from([127, 0, 0, 1], port).expect("connect"))
        .collect();
    // 127.0.0.2 opens more than the bound.
    let began = Instant::now();
    let flood: Vec<std::net::TcpStream> = (0..bound + 500)
        .map_while(|_| connect_tcp_from([127, 0, 0, 2], port).ok())
        .collect();
    eprintln!(
        "127.0.0.2 opened {} connections (the bound is {bound}) in {:?}",
        flood.len(),
        began.elapsed()
    );
    // A new connection of 127.0.0.1 is answered, and so are its older idle ones: the places
    // shed were 127.0.0.2's.
    let request =
        format!("GET /livez HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    let fresh = connect_tcp_from([127, 0, 0, 1], port).expect("connect");
    fresh
        .set_read_timeout(Some(PROBE_TIMEOUT))
        .expect("timeout");
    assert_eq!(status_of(fresh, &request), Ok(200));
    for (i, s) in ours.drain(..).enumerate() {
        s.set_read_timeout(Some(PROBE_TIMEOUT)).expect("timeout");
        assert_eq!(
            status_of(s, &request),
            Ok(200),
            "127.0.0.1's connection #{i}"
        );
    }
    eprintln!(
        "127.0.0.1 answered {:?} after the flood began",
        began.elapsed()
    );
    assert_eq!(flood.len(), bound + 500, "the whole flood was taken");
    // What was shed: 127.0.0.2's oldest connections, closed by the server.
    let closed = |s: &std::net::TcpStream| {
        s.set_nonblocking(true).expect("nonblocking");
        match s.peek(&mut [0u8; 1]) {
            Ok(n) => n == 0,
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
        }
    };
    let shed = flood.iter().filter(|s| closed(s)).count();
    eprintln!("127.0.0.2's connections closed by the server: {shed}");
    assert!(shed >= 500, "{shed} shed");
    drop(flood);
    r.stop();
}

/// Opens `ARGV[1]` connections to the unix socket `ARGV[0]`, sending nothing, prints how many
/// it opened and holds them until its stdin ends.
const HOLD_CONNECTIONS: &str = r#"
use Socket; use IO::Handle;
my ($path, $n) = @ARGV; my @held;
for (1 .. $n) {
    socket(my $s, PF_UNIX, SOCK_STREAM, 0) or die "socket: $!";
    connect($s, pack_sockaddr_un($path)) or die "connect: $!";
    push @held, $s;
}
print scalar(@held), "\n"; STDOUT->flush; <STDIN>;
"#;

#[test]
fn one_uid_cannot_take_every_place_from_another() {
    use std::io::BufRead;
    raise_descriptor_limit();
    let r = common::start(&Setup::new("hostile-uids")).expect("start");
    let manager = manager_of(&r);
    let (soft, _) = testbed::procs::open_files_limit(manager).expect("limits");
    let bound = kres_daemon::api::admission::connection_bound(soft);
    // Root (this test) opens a few connections and sends nothing yet.
    let mut ours: Vec<std::os::unix::net::UnixStream> = (0..20)
        .map(|_| std::os::unix::net::UnixStream::connect(&r.api).expect("connect"))
        .collect();
    // Another uid (in the socket's group) opens more than the bound.
    let began = Instant::now();
    let mut other = std::process::Command::new("setpriv")
        .args(["--reuid=4444", "--regid=0", "--clear-groups", "--"])
        .args(["perl", "-e", HOLD_CONNECTIONS])
        .arg(&r.api)
        .arg((bound + 500).to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("setpriv perl");
    let stdout = other.stdout.take().expect("stdout");
    let (opened_tx, opened) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = opened_tx.send(line);
    });
    let opened = opened.recv_timeout(FLOOD_TIMEOUT);
    eprintln!(
        "uid 4444 opened {opened:?} connections (the bound is {bound}) in {:?}",
        began.elapsed()
    );
    let Ok(opened) = opened else {
        let _ = other.kill();
        let _ = other.wait();
        panic!("uid 4444 could not open its connections within {FLOOD_TIMEOUT:?}");
    };
    // Root's older idle connections are answered, and a new one too: what was shed was the
    // other uid's.
    let request = "GET /livez HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    for (i, s) in ours.drain(..).enumerate() {
        s.set_read_timeout(Some(PROBE_TIMEOUT)).expect("timeout");
        assert_eq!(status_of(s, request), Ok(200), "root's connection #{i}");
    }
    let api = r.api.to_str().expect("UTF-8");
    kresctl(&["-s", api, "health"], &[]).expect("a new connection");
    eprintln!("root answered {:?} after the flood began", began.elapsed());
    assert_eq!(opened.trim(), (bound + 500).to_string());
    drop(other.stdin.take());
    other.wait().expect("perl ends");
    r.stop();
}
