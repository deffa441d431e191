//! Our container image (`dist/container/Containerfile`, built from this test's binaries over
//! the sid root filesystem) under a real podman, loopback only (see `testbed::podman`): PID 1
//! is our daemon, running as root, and the workers run as the unprivileged `knot-resolver`;
//! it answers DNS; a killed worker comes back and answers; an orphan left inside is reaped;
//! the image's health check says healthy, and unhealthy once no worker can run any more;
//! `podman stop` ends it with exit code 0, without a SIGKILL. Upstream's own entrypoint (the
//! Python manager, which execs supervisord) runs in an image of the same base with the same
//! configuration, for the figures printed beside ours (nothing is asserted about them).

mod common;

use std::time::{Duration, Instant};

use anyhow::Result;
use testbed::podman::{Bind, Container, Context, Health, Image, Podman, Process, Stopped};

use common::DAEMON;

const SHIPPED_CONFIG: &str = include_str!("../dist/container/config.yaml");

/// Upstream's entrypoint over the same base: what the knot-resolver6 package installs.
const UPSTREAM_CONTAINERFILE: &str = "ARG BASE\nFROM ${BASE}\n\
    ENTRYPOINT [\"/usr/bin/knot-resolver\"]\n\
    CMD [\"-c\", \"/etc/knot-resolver/config.yaml\"]\n";

/// Generous bound for anything to happen on a loaded 2-core machine; never a timing claim.
const WAIT: Duration = Duration::from_secs(60);

/// How long `podman stop` lets the container end before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(30);

const NAME: &str = "t.example";
const ADDRESS: &str = "192.0.2.7";

/// The image's own configuration with a name of our own to answer.
fn config() -> String {
    format!("{SHIPPED_CONFIG}local-data:\n  addresses:\n    {NAME}: {ADDRESS}\n")
}

/// What one image measured.
struct Figures {
    image_size: u64,
    first_answer: Duration,
    stopped: Stopped,
    pid1: String,
    worker_users: String,
}

fn build_upstream(podman: &Podman) -> Result<Image> {
    let context = Context::new("image-upstream")?;
    context.write("Containerfile", UPSTREAM_CONTAINERFILE)?;
    Image::build(
        podman,
        "upstream",
        &context.dir.join("Containerfile"),
        &context,
    )
}

/// Wait until the container answers our name; how long that took since `since`.
fn wait_answer(ct: &Container, since: Instant) -> Result<Duration> {
    testbed::wait_for(&format!("{NAME} answered with {ADDRESS}"), WAIT, || {
        Ok(ct
            .dig_a(NAME)?
            .iter()
            .any(|a| a == ADDRESS)
            .then(|| since.elapsed()))
    })
}

/// The live kresd processes.
fn workers(ct: &Container) -> Result<Vec<Process>> {
    Ok(ct
        .processes()?
        .into_iter()
        .filter(|p| p.info.comm == "kresd" && p.info.state != 'Z')
        .collect())
}

fn pid1(ct: &Container) -> Result<Process> {
    ct.processes()?
        .into_iter()
        .find(|p| p.info.pid == 1)
        .ok_or_else(|| anyhow::anyhow!("no PID 1 in {}", ct.name))
}

/// The users the workers run as, by name (`kresd` and `kres-cache-gc`).
fn worker_users(ct: &Container) -> Result<String> {
    let passwd = ct.ok(&["cat", "/etc/passwd"])?;
    let name_of = |uid: u32| {
        passwd
            .lines()
            .find(|l| l.split(':').nth(2) == Some(&uid.to_string()))
            .and_then(|l| l.split(':').next())
            .map_or_else(|| uid.to_string(), str::to_owned)
    };
    let mut users: Vec<String> = ct
        .processes()?
        .into_iter()
        .filter(|p| p.info.comm == "kresd" || p.info.comm == "kres-cache-gc")
        .map(|p| name_of(p.uid))
        .collect();
    users.sort();
    users.dedup();
    Ok(users.join(","))
}

/// PID 1 is our daemon, as root; every worker and the cache collector run as the image's
/// unprivileged user.
fn check_identities(ct: &Container) -> Result<()> {
    let first = pid1(ct)?;
    assert_eq!(first.info.comm, "knot-resolver", "PID 1: {first:?}");
    assert_eq!(first.uid, 0, "PID 1 runs as root");
    assert_eq!(
        ct.ok(&["readlink", "/proc/1/exe"])?.trim(),
        "/usr/bin/knot-resolver"
    );
    let inside = ct.ok(&["/usr/bin/knot-resolver", "--version"])?;
    let built = std::process::Command::new(DAEMON)
        .arg("--version")
        .output()?;
    assert_eq!(inside, String::from_utf8_lossy(&built.stdout), "our binary");

    let user: u32 = ct.ok(&["id", "-u", "knot-resolver"])?.trim().parse()?;
    assert_ne!(user, 0);
    let procs = ct.processes()?;
    let unprivileged: Vec<&Process> = procs
        .iter()
        .filter(|p| p.info.comm == "kresd" || p.info.comm == "kres-cache-gc")
        .collect();
    assert_eq!(
        unprivileged
            .iter()
            .filter(|p| p.info.comm == "kresd")
            .count(),
        2,
        "{procs:#?}"
    );
    for p in unprivileged {
        assert_eq!(p.uid, user, "{p:?} runs as knot-resolver ({user})");
    }
    // The manager process, which parses every request, is not root either: the workers' user,
    // binding ports below 1024 its only capability (bit 10), no way to gain more.
    let manager = procs
        .iter()
        .find(|p| p.info.comm == "kres-manager")
        .expect("the manager process");
    assert_eq!(manager.uid, user, "{manager:?}");
    let status = ct.ok(&["cat", &format!("/proc/{}/status", manager.info.pid)])?;
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.trim().to_owned())
            .unwrap_or_default()
    };
    assert_eq!(field("CapEff:"), "0000000000000400", "{status}");
    assert_eq!(field("CapAmb:"), "0000000000000400", "{status}");
    assert_eq!(field("NoNewPrivs:"), "1", "{status}");
    Ok(())
}

/// The workers' user can create its control sockets in the runtime directory, but can neither
/// remove nor replace nor squat what the daemon keeps there: the API socket, the notify
/// socket, the pid file. The API keeps answering on the daemon's own socket.
fn check_workers_cannot_touch_our_files(ct: &Container) -> Result<()> {
    let run = "/run/knot-resolver";
    let stat = ct.ok(&["stat", "-c", "%u %G %a", run])?;
    assert_eq!(stat.trim(), "0 knot-resolver 1770", "the runtime directory");
    let api = format!("{run}/kres-api.sock");
    let inode_before = ct.ok(&["stat", "-c", "%i %u", &api])?;
    for file in [
        "kres-api.sock",
        "supervisor-notify-socket",
        "knot-resolver.pid",
    ] {
        let path = format!("{run}/{file}");
        for attempt in [
            format!("rm -f {path}"),
            format!("mv -f {path} {run}/moved"),
            format!("ln -sf /etc/shadow {path}"),
            format!("ln -f /etc/shadow {path}"),
        ] {
            let out = ct.exec(&[
                "setpriv",
                "--reuid=knot-resolver",
                "--regid=knot-resolver",
                "--init-groups",
                "sh",
                "-c",
                &attempt,
            ])?;
            assert!(
                !out.status.success(),
                "the workers' user could `{attempt}`: {out:?}"
            );
        }
    }
    // It may still create its own files there (its control sockets live in `control/`).
    let own = ct.exec(&[
        "setpriv",
        "--reuid=knot-resolver",
        "--regid=knot-resolver",
        "--init-groups",
        "touch",
        "/run/knot-resolver/workers-file",
    ])?;
    assert!(own.status.success(), "{own:?}");
    assert_eq!(ct.ok(&["stat", "-c", "%i %u", &api])?, inode_before);
    ct.ok(&["/usr/bin/kresctl", "-s", &api, "health"])?;
    Ok(())
}

/// A worker killed with SIGKILL is replaced (by a process of the same user) and DNS answers.
fn check_worker_comes_back(ct: &Container) -> Result<()> {
    let before = workers(ct)?;
    let victim = before[0].info.pid;
    let killed = ct.sh(&format!("kill -KILL {victim}"))?;
    assert!(killed.status.success(), "kill: {killed:?}");
    let after = testbed::wait_for("the killed worker replaced", WAIT, || {
        let now = workers(ct)?;
        Ok((now.len() == before.len() && now.iter().all(|p| p.info.pid != victim)).then_some(now))
    })?;
    assert!(after.iter().all(|p| p.uid == before[0].uid));
    wait_answer(ct, Instant::now())?;
    Ok(())
}

/// A double-forked process left behind by `podman exec` is re-parented to PID 1; once
/// killed, PID 1 reaps it: no zombie stays.
fn check_orphans_reaped(ct: &Container) -> Result<()> {
    let left = ct.sh("(sleep 300 &) ; exit")?;
    assert!(left.status.success(), "{left:?}");
    let orphan = testbed::wait_for("the orphan seen", WAIT, || {
        Ok(ct.processes()?.into_iter().find(|p| p.info.comm == "sleep"))
    })?;
    assert_eq!(orphan.info.ppid, 1, "the orphan's parent: {orphan:?}");
    let killed = ct.sh(&format!("kill -KILL {}", orphan.info.pid))?;
    assert!(killed.status.success(), "kill: {killed:?}");
    testbed::wait_for("the orphan reaped", WAIT, || {
        let procs = ct.processes()?;
        Ok(procs
            .iter()
            .all(|p| p.info.pid != orphan.info.pid)
            .then_some(()))
    })?;
    let zombies: Vec<Process> = ct
        .processes()?
        .into_iter()
        .filter(|p| p.info.state == 'Z')
        .collect();
    assert!(zombies.is_empty(), "zombies: {zombies:#?}");
    Ok(())
}

/// The image's health check: healthy while workers run; unhealthy once kresd is gone from
/// the image and the workers are killed, so that none can start again.
fn check_health_follows_dns(ct: &Container) -> Result<()> {
    testbed::wait_for("healthy", WAIT, || {
        Ok((ct.health()? == Health::Healthy).then_some(()))
    })?;
    let broken = ct.sh("mv /usr/sbin/kresd /usr/sbin/kresd.away && \
         for d in /proc/[0-9]*; do [ \"$(cat $d/comm 2>/dev/null)\" = kresd ] && \
         kill -KILL ${d#/proc/}; done; true")?;
    assert!(broken.status.success(), "{broken:?}");
    let said = testbed::wait_for("unhealthy", WAIT, || {
        Ok(match ct.health()? {
            Health::Healthy => None,
            Health::Unhealthy(said) => Some(said),
        })
    })?;
    assert!(ct.dig_a(NAME)?.is_empty(), "DNS still answered");
    let why = ct.last_health_output()?;
    assert!(
        why.contains("not alive"),
        "podman: {said}; the check: {why}"
    );
    assert_eq!(pid1(ct)?.info.comm, "knot-resolver", "the daemon stays up");
    Ok(())
}

/// Start an image with the test's configuration and measure it; `checks` run while it
/// serves, before it is stopped.
fn exercise(
    image: &Image,
    name: &str,
    checks: impl FnOnce(&Container) -> Result<()>,
) -> Result<Figures> {
    let conf = Context::new(&format!("conf-{name}"))?;
    conf.write("config.yaml", &config())?;
    let started = Instant::now();
    let ct = Container::run(
        image,
        name,
        &[Bind {
            host: &conf.dir,
            inside: "/etc/knot-resolver",
        }],
        &[],
    )?;
    let first_answer =
        wait_answer(&ct, started).map_err(|e| e.context(ct.logs().unwrap_or_default()))?;
    let pid1 = pid1(&ct)?.info.comm;
    let worker_users = worker_users(&ct)?;
    checks(&ct)?;
    let stopped = ct.stop(STOP_GRACE)?;
    Ok(Figures {
        image_size: image.size()?,
        first_answer,
        stopped,
        pid1,
        worker_users,
    })
}

#[test]
fn our_image_under_podman_beside_upstreams() {
    let began = Instant::now();
    let podman = Podman::get().expect("podman bed");
    let ours = common::our_image(podman).expect("building our image");
    assert_eq!(
        ours.inspect("{{.Config.StopSignal}}").expect("inspect"),
        "SIGTERM"
    );
    let health = ours.inspect("{{.HealthCheck.Test}}").expect("inspect");
    assert!(health.contains("kresctl"), "health check: {health}");

    let figures = exercise(&ours, "ours", |ct| {
        check_identities(ct)?;
        check_workers_cannot_touch_our_files(ct)?;
        check_worker_comes_back(ct)?;
        check_orphans_reaped(ct)?;
        assert_eq!(ct.health()?, Health::Healthy);
        Ok(())
    })
    .expect("our image");
    assert_eq!(
        figures.stopped.exit_code, 0,
        "podman stop ended our container cleanly, without SIGKILL"
    );

    // A second container of the same image, whose DNS the test breaks.
    let conf = Context::new("conf-broken").expect("context");
    conf.write("config.yaml", &config()).expect("config");
    let broken = Container::run(
        &ours,
        "ours-broken",
        &[Bind {
            host: &conf.dir,
            inside: "/etc/knot-resolver",
        }],
        &[],
    )
    .expect("second container");
    wait_answer(&broken, Instant::now()).expect("answers");
    check_health_follows_dns(&broken).expect("health follows DNS");
    drop(broken);

    let upstream_image = build_upstream(podman).expect("building upstream's image");
    let upstream =
        exercise(&upstream_image, "upstream", |_| Ok(())).expect("upstream's entrypoint");

    let mb = |b: u64| format!("{:.1} MB", b as f64 / 1e6);
    let secs = |d: Duration| format!("{:.2} s", d.as_secs_f64());
    let stop = |s: &Stopped| format!("{} (exit {})", secs(s.took), s.exit_code);
    println!();
    println!("{:<22} {:>24} {:>24}", "", "ours", "upstream");
    for (what, a, b) in [
        (
            "image size",
            mb(figures.image_size),
            mb(upstream.image_size),
        ),
        (
            "time to first answer",
            secs(figures.first_answer),
            secs(upstream.first_answer),
        ),
        (
            "podman stop",
            stop(&figures.stopped),
            stop(&upstream.stopped),
        ),
        ("PID 1", figures.pid1.clone(), upstream.pid1.clone()),
        (
            "workers run as",
            figures.worker_users.clone(),
            upstream.worker_users.clone(),
        ),
    ] {
        println!("{what:<22} {a:>24} {b:>24}");
    }
    println!(
        "base image {} ({}); whole test {}",
        podman.base,
        mb(testbed::podman::image_size(&podman.base).expect("base size")),
        secs(began.elapsed())
    );
}

/// The arbitrary user the restricted profile runs as: no entry in the image's user database,
/// group root, as OpenShift gives each pod (a fixed number, so every run is the same).
const ARBITRARY_UID: u32 = 1_000_650_000;

/// Kubernetes' restricted profile under podman: our image, its own entrypoint (which names
/// `--worker-user knot-resolver`) run as an arbitrary non-root UID in the root group, every
/// capability dropped but NET_BIND_SERVICE, no privilege escalation, a read-only root file
/// system, tmpfs for the rundir and the cache. The daemon says it cannot switch users and
/// runs everything (the manager process, kresd, the policy-loader, kres-cache-gc) as that
/// UID; it answers on port 53, replaces a killed worker, applies a changed configuration and
/// stops cleanly. Then the same with the rundir on a plain `--tmpfs` (podman's default: root's,
/// mode 1777, like /tmp): it answers too, its files there its own.
#[test]
fn the_restricted_profile_under_an_arbitrary_uid() {
    let podman = Podman::get().expect("podman bed");
    let image = common::our_image_named(podman, "ours-restricted").expect("building our image");
    let conf = Context::new("conf-restricted").expect("context");
    conf.write("config.yaml", &config()).expect("config");
    let started = Instant::now();
    // `U`: the tmpfs belongs to the container's user, as a pod's emptyDir is writable by its
    // UID.
    let ct =
        run_restricted(&image, "restricted", &conf, "/run/knot-resolver:U").expect("podman run");
    let first_answer = wait_answer(&ct, started)
        .map_err(|e| e.context(ct.logs().unwrap_or_default()))
        .expect("answers on port 53");

    let logs = ct.logs().expect("logs");
    assert!(
        logs.contains(&format!("not root (uid {ARBITRARY_UID})")),
        "the daemon says it runs everything as its own user: {logs}"
    );
    let procs = ct.processes().expect("processes");
    let ours: Vec<&Process> = procs
        .iter()
        .filter(|p| {
            ["knot-resolver", "kres-manager", "kresd", "kres-cache-gc"]
                .contains(&p.info.comm.as_str())
        })
        .collect();
    for comm in ["knot-resolver", "kres-manager", "kresd", "kres-cache-gc"] {
        assert!(
            ours.iter().any(|p| p.info.comm == comm),
            "no {comm}: {procs:#?}"
        );
    }
    for p in &ours {
        assert_eq!(p.uid, ARBITRARY_UID, "{p:?}");
    }
    let status = ct.ok(&["cat", "/proc/1/status"]).expect("PID 1's status");
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.trim().to_owned())
            .unwrap_or_default()
    };
    // NET_BIND_SERVICE (bit 10) alone, and no way to gain more.
    assert_eq!(field("CapEff:"), "0000000000000400", "{status}");
    assert_eq!(field("CapBnd:"), "0000000000000400", "{status}");
    assert_eq!(field("NoNewPrivs:"), "1", "{status}");
    let wrote = ct
        .exec(&["touch", "/etc/knot-resolver-written"])
        .expect("exec");
    assert!(!wrote.status.success(), "the root file system is writable");

    check_worker_comes_back(&ct).expect("a killed worker comes back");

    // A change of the configuration, applied by a reload.
    conf.write(
        "config.yaml",
        &format!("{}    u.example: 192.0.2.8\n", config()),
    )
    .expect("changed config");
    ct.ok(&[
        "/usr/bin/kresctl",
        "-s",
        "/run/knot-resolver/kres-api.sock",
        "reload",
    ])
    .expect("kresctl reload");
    testbed::wait_for("u.example answered", WAIT, || {
        Ok(ct
            .dig_a("u.example")?
            .iter()
            .any(|a| a == "192.0.2.8")
            .then_some(()))
    })
    .expect("the change applied");
    assert_eq!(ct.dig_a(NAME).expect("dig"), vec![ADDRESS.to_owned()]);

    let stopped = ct.stop(STOP_GRACE).expect("podman stop");
    assert_eq!(stopped.exit_code, 0, "stopped cleanly, without SIGKILL");
    println!(
        "restricted profile (uid {ARBITRARY_UID}): first answer {:.2} s after podman run, podman stop {:.2} s",
        first_answer.as_secs_f64(),
        stopped.took.as_secs_f64()
    );
    drop(ct);

    // The rundir on podman's default tmpfs: root's, world-writable and sticky.
    conf.write("config.yaml", &config()).expect("config");
    let started = Instant::now();
    let ct =
        run_restricted(&image, "restricted-tmp", &conf, "/run/knot-resolver").expect("podman run");
    let first_answer = wait_answer(&ct, started)
        .map_err(|e| e.context(ct.logs().unwrap_or_default()))
        .expect("answers with a sticky world-writable rundir");
    let rundir = ct
        .ok(&["stat", "-c", "%u %a", "/run/knot-resolver"])
        .expect("stat");
    assert_eq!(rundir.trim(), "0 1777", "podman's default tmpfs");
    let owners = ct
        .ok(&[
            "stat",
            "-c",
            "%u %n",
            "/run/knot-resolver/kres-api.sock",
            "/run/knot-resolver/knot-resolver.pid",
        ])
        .expect("stat");
    for line in owners.lines() {
        assert!(line.starts_with(&format!("{ARBITRARY_UID} ")), "{owners}");
    }
    ct.ok(&[
        "/usr/bin/kresctl",
        "-s",
        "/run/knot-resolver/kres-api.sock",
        "health",
    ])
    .expect("the API answers");
    let stopped = ct.stop(STOP_GRACE).expect("podman stop");
    assert_eq!(stopped.exit_code, 0, "stopped cleanly, without SIGKILL");
    println!(
        "restricted profile, rundir on a plain tmpfs (1777): first answer {:.2} s after podman run",
        first_answer.as_secs_f64()
    );
}

/// Our image in the restricted profile as [`ARBITRARY_UID`] in group 0, the rundir a tmpfs
/// with podman's `rundir_tmpfs` option (`PATH[:OPTIONS]`), the cache a tmpfs of that user.
fn run_restricted(
    image: &Image,
    name: &str,
    conf: &Context,
    rundir_tmpfs: &str,
) -> Result<Container> {
    let user = format!("{ARBITRARY_UID}:0");
    Container::run_with_options(
        image,
        name,
        &[Bind {
            host: &conf.dir,
            inside: "/etc/knot-resolver",
        }],
        &[
            "--user",
            &user,
            "--cap-drop=ALL",
            "--cap-add=NET_BIND_SERVICE",
            "--security-opt",
            "no-new-privileges",
            "--read-only",
            "--tmpfs",
            rundir_tmpfs,
            "--tmpfs",
            "/var/cache/knot-resolver:U",
        ],
        &[],
    )
}
