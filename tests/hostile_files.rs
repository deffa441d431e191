//! Links planted in the rundir by the workers' user (who may write there) never make the
//! daemon write anywhere else, nor change the owner of another file: generated files are
//! created under fresh names, exclusively, without following links, and renamed into place
//! (by the manager process, as the workers' user); they are readable by the workers' group
//! only.

mod common;

use std::os::unix::fs::MetadataExt;

use common::{Setup, DNS_TIMEOUT, STOP_TIMEOUT};
use nix::sys::signal::Signal;
use testbed::{dns, Bed};

/// Every name the daemon writes in the rundir, and the names its older versions wrote through.
const PLANTED: &[&str] = &[
    "kresd0.conf",
    "kresd1.conf",
    "kresd2.conf",
    "kresd0.conf.tmp",
    "kresd1.conf.tmp",
    "kresd2.conf.tmp",
    "canary.conf",
    "canary.conf.tmp",
    "policy-loader.conf",
    "policy-loader.conf.tmp",
];

#[test]
fn links_planted_by_the_workers_user_redirect_no_write() {
    let bed = Bed::get().expect("bed");
    let (uid, gid) = common::bed_user(bed, "knot-resolver");
    let dir = bed.test_dir("planted-links").expect("dir");
    for d in ["run", "cache"] {
        std::fs::create_dir_all(dir.host(d)).expect("dir");
        std::os::unix::fs::chown(dir.host(d), Some(uid), Some(gid)).expect("chown");
    }
    // What the links point at: a file the workers' user must never get the daemon to change,
    // and for hard links (which the kernel lets a user make only to its own files, with
    // `fs.protected_hardlinks`) one of the workers' own.
    let victim = dir.host("victim");
    std::fs::write(&victim, "precious\n").expect("victim");
    let own = dir.host("workers-own");
    std::fs::write(&own, "their own\n").expect("own file");
    std::os::unix::fs::chown(&own, Some(uid), Some(gid)).expect("chown");
    let untouched = |when: &str| {
        assert_eq!(
            std::fs::read_to_string(&victim).expect("victim"),
            "precious\n",
            "{when}"
        );
        assert_eq!(
            std::fs::read_to_string(&own).expect("own file"),
            "their own\n",
            "{when}"
        );
        let meta = std::fs::metadata(&victim).expect("victim");
        assert_eq!(
            (meta.uid(), meta.gid()),
            (0, 0),
            "the victim's owner, {when}"
        );
        let meta = std::fs::metadata(&own).expect("own file");
        assert_eq!((meta.uid(), meta.gid()), (uid, gid), "{when}");
    };
    let run = dir.host("run");
    let plant = |when: &str| {
        for (i, name) in PLANTED.iter().enumerate() {
            let at = run.join(name);
            let _ = std::fs::remove_file(&at);
            if i % 2 == 0 {
                std::os::unix::fs::symlink(&victim, &at).expect("symlink");
                // As the workers' user planted it.
                let _ = nix::unistd::fchownat(
                    nix::fcntl::AT_FDCWD,
                    &at,
                    Some(nix::unistd::Uid::from_raw(uid)),
                    Some(nix::unistd::Gid::from_raw(gid)),
                    nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                );
            } else {
                std::fs::hard_link(&own, &at).expect("hard link");
            }
        }
        untouched(when);
    };
    plant("before the start");

    let port = testbed::free_port().expect("port");
    let setup = Setup::new("planted-links")
        .workers(2)
        .extra("local-data:\n  records: |\n    alive.test. 300 A 192.0.2.9\n");
    let mut launched = common::start_with_worker_user(bed, &dir, port, &setup);
    untouched("after the start");
    let server = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let answer = dns::query_udp(server, "alive.test.", dns::TYPE_A, DNS_TIMEOUT).expect("DNS");
    assert_eq!(answer.a().len(), 1);

    // Generated files: written by the manager process as the workers' user; the workers'
    // group may read them, nobody else.
    for name in ["kresd0.conf", "kresd1.conf"] {
        let meta = std::fs::symlink_metadata(run.join(name)).expect("generated");
        assert!(meta.file_type().is_file(), "{name} is a file of its own");
        assert_eq!(meta.nlink(), 1, "{name} is a file of its own");
        assert_eq!(meta.mode() & 0o777, 0o640, "{name} mode");
        assert_eq!((meta.uid(), meta.gid()), (uid, gid), "{name} owner");
    }

    // Planted again while it runs, then a change that rewrites every file (canary,
    // policy-loader, a rolling restart and a new worker).
    plant("while running");
    let api = dir.host("run/kres-api.sock");
    let resp = testbed::http::request(
        &api,
        "PUT",
        "/v1/config/workers",
        &[("Content-Type", "application/json")],
        b"3",
    )
    .expect("API");
    assert_eq!(resp.status, 200, "{}", resp.text());
    untouched("after a change");
    let victim_meta = std::fs::metadata(&victim).expect("victim");
    assert_eq!(
        victim_meta.mode() & 0o777,
        0o644,
        "the victim's mode is untouched"
    );
    let answer = dns::query_udp(server, "alive.test.", dns::TYPE_A, DNS_TIMEOUT).expect("DNS");
    assert_eq!(answer.a().len(), 1);

    // A script file only root may read is not read on the workers' behalf: the change is
    // refused, and its text appears in no generated file.
    let secret = dir.host("secret.lua");
    std::fs::write(&secret, "-- top secret 7f3a\n").expect("secret");
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("mode");
    let body = format!(
        "{{\"script-file\": \"{}\"}}",
        dir.bed("secret.lua").display()
    );
    let resp = testbed::http::request(
        &api,
        "PUT",
        "/v1/config/lua",
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    )
    .expect("API");
    assert_eq!(resp.status, 400, "{}", resp.text());
    // Checked by the manager process, which runs as the workers' user: upstream's wording.
    assert!(
        resp.text()
            .contains("knot-resolver:knot-resolver has insufficient permissions to read"),
        "{}",
        resp.text()
    );
    for entry in std::fs::read_dir(&run).expect("rundir").flatten() {
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            let text = std::fs::read(entry.path()).unwrap_or_default();
            assert!(
                !String::from_utf8_lossy(&text).contains("top secret 7f3a"),
                "{} holds the secret",
                entry.path().display()
            );
        }
    }

    launched.signal(Signal::SIGINT).expect("signal");
    let status = launched.wait(STOP_TIMEOUT).expect("exit");
    assert_eq!(status.code(), Some(0), "{}", launched.output.text());
    untouched("after the stop");
}
