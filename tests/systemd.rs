//! Under a real systemd (PID 1 of the sid root filesystem, booted with systemd-nspawn; see
//! `testbed::machine`): the knot-resolver6 package's own unit, unchanged, with our binaries in
//! place of the Python ones; then our shipped unit; then our unit as `Type=notify-reload`.
//! Each: start → active with a status, answers; `systemctl reload` applies a change; a bad
//! reload is refused while the unit stays active and answering; a killed worker comes back;
//! the journal gets native entries (priority, identifier, no timestamp of ours); `systemctl
//! stop` leaves no process. Upstream's manager runs through the same steps in a machine of its
//! own, for the figures printed beside ours (nothing is asserted about its timings).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::Value;
use testbed::machine::{Bind, Machine};

const UNIT: &str = "knot-resolver.service";
const DAEMON: &str = env!("CARGO_BIN_EXE_knot-resolver");
const KRESCTL: &str = env!("CARGO_BIN_EXE_kresctl");
const SHIPPED_UNIT: &str = include_str!("../dist/systemd/knot-resolver.service");
const WAIT: Duration = Duration::from_secs(30);

fn config(address: &str) -> String {
    format!(
        "workers: 2\nnetwork:\n  listen:\n    - interface: 127.0.0.1@53\n\
         logging:\n  level: info\n\
         local-data:\n  addresses:\n    t.example: {address}\n"
    )
}

/// A machine named `name` (one per test: tests run at once) with our binaries.
fn ours(name: &str) -> Result<Machine> {
    Machine::boot(
        name,
        &[
            Bind {
                host: Path::new(DAEMON),
                inside: "/usr/bin/knot-resolver",
            },
            Bind {
                host: Path::new(KRESCTL),
                inside: "/usr/bin/kresctl",
            },
        ],
    )
}

/// What one pass through the steps measured.
#[derive(Debug)]
struct Figures {
    start: Duration,
    reload: Duration,
    stop: Duration,
    /// `systemctl reload`'s exit status on a refused configuration.
    bad_reload_status: std::process::ExitStatus,
    failed_reload_journal: Vec<String>,
}

fn timed(m: &Machine, argv: &[&str]) -> Result<(Duration, std::process::Output)> {
    let t = Instant::now();
    let out = m.run(argv)?;
    Ok((t.elapsed(), out))
}

fn must(what: &str, out: &std::process::Output) -> Result<()> {
    testbed::succeeded(what, out).map(drop)
}

fn wait_answer(m: &Machine, address: &str) -> Result<()> {
    m.wait_for(&format!("t.example answered with {address}"), WAIT, || {
        Ok(m.dig_a("t.example")?
            .iter()
            .any(|a| a == address)
            .then_some(()))
    })
}

fn kresd_pids(m: &Machine) -> Result<Vec<i32>> {
    Ok(m.unit_processes(UNIT)?
        .into_iter()
        .filter(|(_, comm)| comm == "kresd")
        .map(|(pid, _)| pid)
        .collect())
}

/// The steps every unit goes through. `ours` adds the checks of our own behaviour.
/// `exit_reports_refusal`: whether `systemctl reload` itself fails on a refused configuration
/// (with `ExecReload=kresctl reload`; with `Type=notify-reload` systemd has no way to learn of
/// a refusal, which then shows in the status text and the journal only).
fn exercise(m: &Machine, ours: bool, exit_reports_refusal: bool) -> Result<Figures> {
    m.write("/etc/knot-resolver/config.yaml", &config("192.0.2.7"))?;
    let (start, out) = timed(m, &["systemctl", "start", UNIT])?;
    must("systemctl start", &out)?;
    assert_eq!(m.show(UNIT, "ActiveState")?, "active");
    wait_answer(m, "192.0.2.7")?;
    if ours {
        let status = m.show(UNIT, "StatusText")?;
        assert!(status.contains("2 workers"), "status: {status:?}");
    }

    m.write("/etc/knot-resolver/config.yaml", &config("192.0.2.8"))?;
    let (reload, out) = timed(m, &["systemctl", "reload", UNIT])?;
    must("systemctl reload", &out)?;
    wait_answer(m, "192.0.2.8")?;

    let before_bad = journal_cursor(m)?;
    m.write("/etc/knot-resolver/config.yaml", &config("not-an-address"))?;
    let out = m.run(&["systemctl", "reload", UNIT])?;
    let out_bad = out.status;
    if exit_reports_refusal {
        assert!(!out.status.success(), "a bad reload was accepted");
    }
    assert_eq!(m.show(UNIT, "ActiveState")?, "active");
    assert_eq!(m.dig_a("t.example")?, vec!["192.0.2.8".to_owned()]);
    let failed_reload_journal = journal_since(m, before_bad.as_deref())?;
    if ours {
        assert!(
            failed_reload_journal
                .iter()
                .any(|l| l.contains("/local-data/addresses/t.example")),
            "the refusal names the offending path: {failed_reload_journal:#?}"
        );
        let status = m.show(UNIT, "StatusText")?;
        assert!(status.contains("reload failed"), "status: {status:?}");
    }
    if ours && exit_reports_refusal {
        // `ExecReload=kresctl reload`: its refusal reaches the journal at error priority,
        // naming the file and the offending path.
        let kresctl_error = |needle: &str| {
            failed_reload_journal
                .iter()
                .any(|l| l.starts_with("kresctl[") && l.contains(" <3>: ") && l.contains(needle))
        };
        assert!(
            kresctl_error("/etc/knot-resolver/config.yaml: ")
                && kresctl_error("[/local-data/addresses/t.example]"),
            "kresctl's refusal at error priority: {failed_reload_journal:#?}"
        );
        assert!(
            !failed_reload_journal
                .iter()
                .any(|l| l.starts_with("kresctl[") && !l.contains(" <3>: ")),
            "every line of kresctl's refusal at error priority: {failed_reload_journal:#?}"
        );
    }
    m.write("/etc/knot-resolver/config.yaml", &config("192.0.2.8"))?;

    // A worker killed: replaced, the unit stays active.
    let pids = kresd_pids(m)?;
    assert_eq!(pids.len(), 2, "{:?}", m.unit_processes(UNIT)?);
    must("kill", &m.sh(&format!("kill -KILL {}", pids[0]))?)?;
    m.wait_for("the killed worker replaced", WAIT, || {
        let now = kresd_pids(m)?;
        Ok((now.len() == 2 && !now.contains(&pids[0])).then_some(()))
    })?;
    assert_eq!(m.show(UNIT, "ActiveState")?, "active");
    wait_answer(m, "192.0.2.8")?;

    if ours {
        check_journal(m)?;
    }

    let (stop, out) = timed(m, &["systemctl", "stop", UNIT])?;
    must("systemctl stop", &out)?;
    assert_eq!(m.show(UNIT, "ActiveState")?, "inactive");
    assert_eq!(m.show(UNIT, "Result")?, "success");
    assert!(
        m.unit_processes(UNIT)?.is_empty(),
        "left: {:?}",
        m.unit_processes(UNIT)?
    );
    Ok(Figures {
        start,
        reload,
        stop,
        bad_reload_status: out_bad,
        failed_reload_journal,
    })
}

/// systemd's timeouts, with our shipped unit: a policy-loader that outlasts
/// `TimeoutStartSec` extends it (`EXTEND_TIMEOUT_USEC`) and the start succeeds; with
/// `WatchdogSec=`, keepalives arrive, and a root that stops answering (SIGSTOP) is killed
/// by systemd's watchdog and started again (`Restart=on-failure`), answering again.
fn timeouts(m: &Machine) -> Result<()> {
    let dropin = "/etc/systemd/system/knot-resolver.service.d/timeouts.conf";
    // The policy-loader runs the policy script: 6 s against a 3 s start timeout.
    m.write(
        "/etc/knot-resolver/config.yaml",
        &(config("192.0.2.9") + "lua:\n  policy-script: os.execute('sleep 6')\n"),
    )?;
    m.write(dropin, "[Service]\nTimeoutStartSec=3s\n")?;
    m.ok(&["systemctl", "daemon-reload"])?;
    let out = m.run(&["systemctl", "start", UNIT])?;
    must("systemctl start with a slow policy-loader", &out)?;
    assert_eq!(m.show(UNIT, "ActiveState")?, "active");
    wait_answer(m, "192.0.2.9")?;
    must("systemctl stop", &m.run(&["systemctl", "stop", UNIT])?)?;

    m.write("/etc/knot-resolver/config.yaml", &config("192.0.2.10"))?;
    m.write(
        dropin,
        "[Service]\nWatchdogSec=1s\nTimeoutAbortSec=2s\nRestartSec=100ms\n",
    )?;
    m.ok(&["systemctl", "daemon-reload"])?;
    must("systemctl start", &m.run(&["systemctl", "start", UNIT])?)?;
    wait_answer(m, "192.0.2.10")?;
    // Each keepalive moves the watchdog timestamp.
    let mut seen = std::collections::BTreeSet::new();
    m.wait_for("three watchdog keepalives", WAIT, || {
        seen.insert(m.show(UNIT, "WatchdogTimestampMonotonic")?);
        Ok((seen.len() >= 3).then_some(()))
    })?;
    assert_eq!(m.show(UNIT, "ActiveState")?, "active");
    let main_pid = m.show(UNIT, "MainPID")?;
    let restarts: u32 = m.show(UNIT, "NRestarts")?.parse()?;
    let before = journal_cursor(m)?;
    must("SIGSTOP", &m.sh(&format!("kill -STOP {main_pid}"))?)?;
    m.wait_for("the hung root replaced", WAIT, || {
        let now: u32 = m.show(UNIT, "NRestarts")?.parse()?;
        let active = m.show(UNIT, "ActiveState")? == "active";
        Ok((now > restarts && active && m.show(UNIT, "MainPID")? != main_pid).then_some(()))
    })?;
    wait_answer(m, "192.0.2.10")?;
    let journal = journal_since(m, before.as_deref())?;
    assert!(
        journal.iter().any(|l| l.contains("Watchdog timeout")),
        "systemd's watchdog fired: {journal:#?}"
    );
    must("systemctl stop", &m.run(&["systemctl", "stop", UNIT])?)?;
    m.sh(&format!("rm -f {dropin}"))?;
    m.ok(&["systemctl", "daemon-reload"])?;
    Ok(())
}

/// A text field of a journal entry. journalctl gives a field with control characters (a
/// multi-line message) as an array of bytes.
fn field(entry: &Value, key: &str) -> Option<String> {
    match entry.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Array(bytes) => {
            let bytes: Vec<u8> = bytes
                .iter()
                .filter_map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
                .collect();
            Some(String::from_utf8_lossy(&bytes).into_owned())
        }
        _ => None,
    }
}

/// The cursor of the unit's last journal entry, if it has one.
fn journal_cursor(m: &Machine) -> Result<Option<String>> {
    Ok(m.journal(UNIT, None)?
        .last()
        .and_then(|e| field(e, "__CURSOR")))
}

/// The unit's journal lines after `cursor`, as `IDENTIFIER[PID] <PRIORITY>: MESSAGE`.
fn journal_since(m: &Machine, cursor: Option<&str>) -> Result<Vec<String>> {
    Ok(m.journal(UNIT, cursor)?
        .iter()
        .map(|e| {
            let f = |k: &str| field(e, k).unwrap_or_default();
            format!(
                "{}[{}] <{}>: {}",
                f("SYSLOG_IDENTIFIER"),
                f("_PID"),
                f("PRIORITY"),
                f("MESSAGE")
            )
        })
        .collect())
}

/// Native journal entries: our own with a priority and no timestamp of ours in the message,
/// the children's under their own names with their pids, kresd's with its own levels.
fn check_journal(m: &Machine) -> Result<()> {
    let entries = m.journal(UNIT, None)?;
    let by = |id: &str| -> Vec<&Value> {
        entries
            .iter()
            .filter(|e| field(e, "SYSLOG_IDENTIFIER").as_deref() == Some(id))
            .collect()
    };
    let daemon = by("knot-resolver");
    assert!(!daemon.is_empty(), "no entry of the daemon itself");
    for e in &daemon {
        let message = field(e, "MESSAGE").unwrap_or_default();
        assert!(field(e, "PRIORITY").is_some(), "no PRIORITY: {e}");
        assert!(
            !message.starts_with("20") && !message.contains(" INFO "),
            "a timestamp or level of ours inside the message: {message:?}"
        );
    }
    assert!(!by("kres-manager").is_empty(), "no entry of the manager");
    let gc = by("cache-gc");
    assert!(!gc.is_empty(), "no entry under cache-gc");
    assert!(
        gc.iter().all(|e| field(e, "SYSLOG_PID").is_some()),
        "cache-gc entries without SYSLOG_PID"
    );
    // kresd logs to the journal itself (`--logtarget=syslog`, so `logging.target` is syslog):
    // its entries carry kresd's own levels, not the one we give lines we pass on.
    let kresd: Vec<&Value> = entries
        .iter()
        .filter(|e| field(e, "_COMM").as_deref() == Some("kresd"))
        .collect();
    let senders: std::collections::BTreeSet<(Option<String>, Option<String>)> = entries
        .iter()
        .map(|e| (field(e, "SYSLOG_IDENTIFIER"), field(e, "_COMM")))
        .collect();
    assert!(!kresd.is_empty(), "no entry of kresd among {senders:?}");
    assert!(
        kresd.iter().all(|e| field(e, "PRIORITY").is_some()),
        "kresd entries without PRIORITY"
    );
    Ok(())
}

#[test]
fn under_real_systemd_the_package_unit_and_ours() {
    let m = ours("systemd-ours").expect("booting the machine");
    // The knot-resolver6 package's unit, unchanged.
    let package = exercise(&m, true, true).expect("the package's unit");
    // Our shipped unit in its place.
    m.write("/etc/systemd/system/knot-resolver.service", SHIPPED_UNIT)
        .expect("install our unit");
    m.ok(&["systemctl", "daemon-reload"])
        .expect("daemon-reload");
    let shipped = exercise(&m, true, true).expect("our shipped unit");
    timeouts(&m).expect("start timeout extended, watchdog honoured");
    // As Type=notify-reload: systemd sends SIGHUP and waits for RELOADING=1 then READY=1.
    m.write(
        "/etc/systemd/system/knot-resolver.service.d/notify-reload.conf",
        "[Service]\nType=notify-reload\nExecReload=\n",
    )
    .expect("drop-in");
    m.ok(&["systemctl", "daemon-reload"])
        .expect("daemon-reload");
    let notify_reload = exercise(&m, true, false).expect("Type=notify-reload");
    drop(m);

    // Upstream's manager in its own machine, for the figures.
    let upstream = Machine::boot("systemd-upstream", &[])
        .and_then(|m| exercise(&m, false, false))
        .expect("upstream's manager under the same steps");
    for (name, f) in [
        ("ours, package unit", &package),
        ("ours, shipped unit", &shipped),
        ("ours, notify-reload", &notify_reload),
        ("upstream", &upstream),
    ] {
        eprintln!(
            "{name:22} start {:>8.1?}  reload {:>8.1?}  stop {:>8.1?}  refused reload: {}",
            f.start, f.reload, f.stop, f.bad_reload_status
        );
    }
    for (name, f) in [("ours", &package), ("upstream", &upstream)] {
        eprintln!("-- journal of a failed reload, {name}:");
        for line in &f.failed_reload_journal {
            eprintln!("   {line}");
        }
    }
}

/// A `systemctl restart` of our unit under load, with the sockets kept in systemd's
/// descriptor store, and without (`FileDescriptorStoreMax=0`) for the figures beside it.
/// Queries sent while nothing runs wait in the kept sockets and are answered by the new
/// workers. Returns (lost, sent, restart time).
fn restart_under_load(m: &Machine, rate: u32) -> Result<(u64, u64, Duration)> {
    let before = m.show(UNIT, "MainPID")?;
    let load = m.in_network(|| {
        testbed::load::Load::start(testbed::load::LoadSpec::new(
            "127.0.0.1:53".parse()?,
            rate,
            "t.example",
        ))
    })?;
    anyhow::ensure!(
        load.wait_answers(u64::from(rate / 4), WAIT),
        "no steady answers before the restart"
    );
    let (restart, out) = timed(m, &["systemctl", "restart", UNIT])?;
    must("systemctl restart", &out)?;
    anyhow::ensure!(
        load.wait_answers(u64::from(rate / 4), WAIT),
        "no answers after the restart"
    );
    let report = load.stop();
    assert_ne!(m.show(UNIT, "MainPID")?, before, "the daemon was restarted");
    Ok((report.sent - report.answered, report.sent, restart))
}

#[test]
fn systemctl_restart_keeps_the_sockets_bound() {
    let m = ours("systemd-restart").expect("booting the machine");
    m.write("/etc/systemd/system/knot-resolver.service", SHIPPED_UNIT)
        .expect("install our unit");
    m.write("/etc/knot-resolver/config.yaml", &config("192.0.2.7"))
        .expect("config");
    // More restarts in a row than systemd's default start limit allows.
    m.write(
        "/etc/systemd/system/knot-resolver.service.d/restarts.conf",
        "[Unit]\nStartLimitIntervalSec=0\n",
    )
    .expect("drop-in");
    m.ok(&["systemctl", "daemon-reload"])
        .expect("daemon-reload");
    m.ok(&["systemctl", "start", UNIT]).expect("start");
    wait_answer(&m, "192.0.2.7").expect("answers");
    let api = "/run/knot-resolver/kres-api.sock";
    let inode = |m: &Machine| m.ok(&["stat", "-c", "%i", api]);
    let api_before = inode(&m).expect("the API socket");
    let cursor = journal_cursor(&m).expect("cursor");

    let rate = 2000;
    let (lost, sent, restart) = restart_under_load(&m, rate).expect("restart under load");
    let journal = journal_since(&m, cursor.as_deref()).expect("journal");
    assert!(
        journal
            .iter()
            .any(|l| l.contains("the service manager kept") && l.contains("listening sockets")),
        "the new daemon took its sockets from systemd: {journal:#?}"
    );
    assert_eq!(
        inode(&m).expect("the API socket"),
        api_before,
        "the API socket was kept, not bound anew"
    );
    // The API answers on the kept socket.
    m.ok(&["kresctl", "--socket", api, "config", "get"])
        .expect("kresctl on the kept API socket");
    assert_eq!(
        lost, 0,
        "{lost} of {sent} queries lost through systemctl restart"
    );

    // A configuration that drops one of the addresses: the new daemon closes the socket it
    // no longer needs and has systemd forget it (the next restart does not get it back).
    m.write(
        "/etc/knot-resolver/config.yaml",
        &config("192.0.2.7").replace("workers: 2", "workers: 1"),
    )
    .expect("config");
    m.ok(&["systemctl", "restart", UNIT]).expect("restart");
    wait_answer(&m, "192.0.2.7").expect("answers with one worker");
    let cursor = journal_cursor(&m).expect("cursor");
    m.ok(&["systemctl", "restart", UNIT]).expect("restart");
    wait_answer(&m, "192.0.2.7").expect("answers");
    let journal = journal_since(&m, cursor.as_deref()).expect("journal");
    // One worker: UDP and TCP on 127.0.0.1@53, and the API socket.
    assert!(
        journal
            .iter()
            .any(|l| l.contains("the service manager kept 3 listening sockets")),
        "systemd kept only what one worker and the API use: {journal:#?}"
    );
    m.write("/etc/knot-resolver/config.yaml", &config("192.0.2.7"))
        .expect("config");
    m.ok(&["systemctl", "restart", UNIT]).expect("restart");
    wait_answer(&m, "192.0.2.7").expect("answers");

    // The same restart with nothing kept, for the figures.
    m.write(
        "/etc/systemd/system/knot-resolver.service.d/no-store.conf",
        "[Service]\nFileDescriptorStoreMax=0\n",
    )
    .expect("drop-in");
    m.ok(&["systemctl", "daemon-reload"])
        .expect("daemon-reload");
    m.ok(&["systemctl", "restart", UNIT]).expect("restart");
    wait_answer(&m, "192.0.2.7").expect("answers");
    let (lost_unkept, sent_unkept, restart_unkept) =
        restart_under_load(&m, rate).expect("restart under load without the store");
    m.ok(&["systemctl", "stop", UNIT]).expect("stop");
    eprintln!(
        "systemctl restart at {rate} q/s: sockets kept: {lost} of {sent} lost, restart {restart:.1?}; \
         not kept: {lost_unkept} of {sent_unkept} lost, restart {restart_unkept:.1?}"
    );
}

/// The "Overall exposure level" `systemd-analyze security --offline=true` gives the unit file
/// at `path` (a property of the file: nothing is booted).
fn exposure(path: &Path) -> Result<f64> {
    let out = std::process::Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(path)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let level = text
        .lines()
        .find_map(|l| {
            l.split_once("Overall exposure level for ")?
                .1
                .split_once(": ")
        })
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no exposure level in: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    Ok(level.parse()?)
}

/// Our shipped unit is sandboxed at least as tightly as systemd-resolved's (2.2 "OK"): at most
/// 2.5, where upstream's unit (from the knot-resolver6 package) rates 7.1 "MEDIUM". The same
/// unit passes every real-systemd test above.
#[test]
fn the_shipped_unit_is_sandboxed() {
    let ours = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("dist/systemd")
        .join(UNIT);
    let ours = exposure(&ours).expect("our unit's exposure");
    let upstream = testbed::sid_rootfs()
        .map(|r| r.join("usr/lib/systemd/system").join(UNIT))
        .and_then(|p| exposure(&p))
        .expect("upstream's unit's exposure");
    eprintln!("systemd-analyze security exposure: ours {ours:.1}, upstream's {upstream:.1}");
    assert!(ours <= 2.5, "our unit's exposure is {ours}");
    assert!(ours < upstream, "ours {ours}, upstream's {upstream}");
}
