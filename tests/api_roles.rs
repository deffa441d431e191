//! Roles on the API's unix socket against the real daemon and real kresd: with
//! `--api-read-only-group` and `--api-admin-group`, the socket belongs to the read-only group,
//! a reader's kresctl (another uid, the group as a supplementary one, so the kernel's
//! `SO_PEERGROUPS` must say so) reads the configuration and is refused every change with 403,
//! which leaves configuration and ETag as they were and is logged with its uid, gid and pid;
//! a member of the admin group and root change the configuration; a user in neither group
//! cannot even connect. An unknown group stops the daemon at start. Over TCP, the read-only
//! bearer token reads and is refused changes and the reads of personal data (the query log,
//! top clients, traces); the admin token changes and reads them.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Output};

use common::{Setup, KRESCTL, STOP_TIMEOUT};
use serde_json::{json, Value};
use testbed::Bed;

/// Users of this test: uids no user database names, so only the kernel's credentials can
/// give them a group.
const READER: (u32, u32) = (4242, 4242);
const ADMIN: (u32, u32) = (4343, 4343);
const STRANGER: (u32, u32) = (4444, 4444);

/// Run our kresctl against `r` as `uid`/`gid` with supplementary `groups` (`setpriv` sets
/// them and executes kresctl in the same process); returns its pid and output.
fn kresctl_as(
    r: &common::Resolver,
    (uid, gid): (u32, u32),
    groups: &[u32],
    args: &[&str],
) -> (u32, Output) {
    let groups: Vec<String> = groups.iter().map(u32::to_string).collect();
    let groups = if groups.is_empty() {
        "--clear-groups".to_owned()
    } else {
        format!("--groups={}", groups.join(","))
    };
    let child = Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg(groups)
        .arg("--")
        .arg(KRESCTL)
        .arg("-s")
        .arg(&r.api)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("setpriv");
    let pid = child.id();
    (pid, child.wait_with_output().expect("kresctl ends"))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A gid of the bed's group database.
fn bed_group(bed: &Bed, name: &str) -> u32 {
    let groups =
        std::fs::read_to_string(bed.host_path(std::path::Path::new("/etc/group"))).expect("group");
    groups
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:x:")))
        .and_then(|rest| rest.split(':').next())
        .and_then(|gid| gid.parse().ok())
        .expect("group exists in the bed")
}

/// A reader (in the `readers` group) is refused every change: 403, kresctl says so and exits
/// 1, and the daemon logs the refusal with the client's uid, gid and pid.
fn a_reader_is_refused_changes(r: &common::Resolver, readers: u32) {
    let (pid, out) = kresctl_as(
        r,
        READER,
        &[readers],
        &[
            "config",
            "set",
            "-p",
            "/local-data/records",
            "\"roles.test. 300 A 192.0.2.2\"",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "permission denied: PUT /v1/config/local-data/records needs the admin role; this \
         client has the read-only role\n"
    );
    let line = r
        .launched
        .output
        .wait_for("refused: PUT /v1/config/local-data/records", STOP_TIMEOUT)
        .expect("the refusal is logged");
    assert!(
        line.contains(&format!("uid {} gid {} pid {pid}", READER.0, READER.1)),
        "{line}"
    );
    let (pid, out) = kresctl_as(r, READER, &[readers], &["reload"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("permission denied: POST /reload needs the admin role"),
        "{}",
        stderr(&out)
    );
    r.launched
        .output
        .wait_for(&format!("pid {pid} refused: POST /reload"), STOP_TIMEOUT)
        .expect("the refusal is logged");
}

#[test]
fn a_reader_reads_and_is_refused_changes_an_admin_group_member_and_root_change() {
    let bed = Bed::get().expect("bed");
    let (readers, admins) = (bed_group(bed, "nogroup"), bed_group(bed, "knot"));
    let r = common::start(
        &Setup::new("roles")
            .arg("--api-read-only-group")
            .arg("nogroup")
            .arg("--api-admin-group")
            .arg("knot")
            .extra("local-data:\n  records: |\n    roles.test. 300 A 192.0.2.1\n"),
    )
    .expect("start");

    // The socket belongs to the readers' group, mode 0660.
    let meta = std::fs::metadata(&r.api).expect("socket");
    assert_eq!(meta.gid(), readers);
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);

    let etag = r.etag();
    let before = r.http("GET", "/v1/config", b"").expect("GET").body;

    // A reader reads.
    let started = std::time::Instant::now();
    let (_, out) = kresctl_as(&r, READER, &[readers], &["config", "get", "--json"]);
    eprintln!("kresctl config get as a reader: {:?}", started.elapsed());
    assert!(out.status.success(), "{}", stderr(&out));
    let shown: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(shown["workers"], json!(1));
    let (_, out) = kresctl_as(&r, READER, &[readers], &["pids"]);
    assert!(out.status.success(), "{}", stderr(&out));

    // ... and is refused every change.
    a_reader_is_refused_changes(&r, readers);
    assert_eq!(r.etag(), etag, "the ETag is unchanged");
    let after = r.http("GET", "/v1/config", b"").expect("GET").body;
    assert_eq!(after, before, "the configuration is unchanged");
    assert_eq!(r.a_records("roles.test."), vec!["192.0.2.1"]);

    // Someone in neither group cannot even connect: the socket's mode keeps them out.
    let (_, out) = kresctl_as(&r, STRANGER, &[], &["config", "get"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("Permission denied"),
        "{}",
        stderr(&out)
    );

    // A member of the admin group (and of the socket's group, to connect) changes.
    let (_, out) = kresctl_as(
        &r,
        ADMIN,
        &[admins, readers],
        &[
            "config",
            "set",
            "-p",
            "/local-data/records",
            "\"roles.test. 300 A 192.0.2.3\"",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(r.a_records("roles.test."), vec!["192.0.2.3"]);
    assert_ne!(r.etag(), etag);

    // Root still changes.
    let resp = r.put_json("/local-data/records", json!("roles.test. 300 A 192.0.2.4"));
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(r.a_records("roles.test."), vec!["192.0.2.4"]);
    r.stop();
}

#[test]
fn an_unknown_group_stops_the_daemon_at_start() {
    let mut r = common::launch(
        &Setup::new("roles-unknown").env("KRES_API_READ_ONLY_GROUP", "no-such-group-of-roles"),
    )
    .expect("launch");
    let status = r.launched.wait(STOP_TIMEOUT).expect("exit");
    let output = r.launched.output.text();
    assert_eq!(status.code(), Some(1), "{output}");
    assert!(
        output.contains("--api-read-only-group: no group named \"no-such-group-of-roles\""),
        "{output}"
    );
    assert!(r.launched.tree().is_empty());
    assert!(!r.api.exists(), "no API socket was bound");
}

#[test]
fn over_tcp_the_read_only_token_reads_and_only_the_admin_token_changes() {
    let port = testbed::free_port().expect("port");
    let bed = Bed::get().expect("bed");
    let tokens = bed.test_dir("roles-tokens").expect("dir");
    testbed::write(&tokens.host("admin"), "admin-token-of-roles\n").expect("token");
    testbed::write(&tokens.host("reader"), "  reader-token-of-roles\n").expect("token");
    let r = common::start(
        &Setup::new("roles-tcp")
            .management(&format!("  interface: 127.0.0.1@{port}\n"))
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
    let kresctl = |var: &str, file: &str, args: &[&str]| {
        Command::new(KRESCTL)
            .args(["-s", &url])
            .args(args)
            .env(var, tokens.host(file))
            .output()
            .expect("kresctl")
    };
    let config = |var: &str, file: &str| {
        let out = kresctl(var, file, &["config", "get", "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice::<Value>(&out.stdout).expect("JSON")
    };
    let before = config("KRES_API_READ_ONLY_TOKEN_FILE", "reader");
    assert_eq!(before["workers"], json!(1));
    let out = kresctl(
        "KRES_API_READ_ONLY_TOKEN_FILE",
        "reader",
        &["config", "set", "-p", "/workers", "2"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "permission denied: PUT /v1/config/workers needs the admin role; this client has the \
         read-only role\n"
    );
    let line = r
        .launched
        .output
        .wait_for("refused: PUT /v1/config/workers needs", STOP_TIMEOUT)
        .expect("the refusal is logged");
    assert!(line.contains("from 127.0.0.1:"), "{line}");
    assert_eq!(
        config("KRES_API_TOKEN_FILE", "admin"),
        before,
        "nothing changed"
    );
    let out = kresctl("KRES_API_TOKEN_FILE", "admin", &["reload"]);
    assert!(out.status.success(), "{}", stderr(&out));
    personal_data_is_the_admins_only(port);
    r.stop();
}

/// The reads that show client addresses or single queries are refused the read-only token
/// (the one monitoring gets), the counts without addresses are not; the admin token reads
/// both.
fn personal_data_is_the_admins_only(port: u16) {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let status = |token: &str, path: &str| {
        let bearer = format!("Bearer {token}");
        testbed::http::request_tcp(addr, "GET", path, &[("Authorization", &bearer)], b"")
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
    };
    for path in [
        "/query-log",
        "/query-log?limit=5",
        "/query-log/stream",
        "/top/clients",
        "/trace/example.com/A",
    ] {
        let answer = status("reader-token-of-roles", path);
        assert_eq!(answer.status, 403, "{path}: {}", answer.text());
        assert!(
            answer.text().contains("needs the admin role"),
            "{path}: {}",
            answer.text()
        );
    }
    for path in [
        "/metrics/prometheus",
        "/top/names",
        "/top/servfail",
        "/query-log/status",
    ] {
        let answer = status("reader-token-of-roles", path);
        assert_eq!(answer.status, 200, "{path}: {}", answer.text());
    }
    for path in ["/query-log", "/top/clients"] {
        let answer = status("admin-token-of-roles", path);
        assert_eq!(answer.status, 200, "{path}: {}", answer.text());
    }
}
