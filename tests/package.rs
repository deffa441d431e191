//! The Debian package on the system it is for. Built from this test build's own binaries and
//! generated files (`dist/debian/build-deb.sh --prebuilt`), installed with dpkg on top of
//! knot-resolver6 in the sid root filesystem booted under its real systemd
//! (`testbed::machine`, nothing bound over the package's files), then purged:
//! - installing diverts upstream's binaries, unit, kresctl(8) and bash completion, puts ours
//!   in their place with our pages and completions, and restarts the running resolver on our
//!   daemon (Ready status, answers); `systemctl stop` and `start` work on it; `kres-manager`
//!   (upstream 6.5's other name) is our daemon, which runs the resolver under that name, and
//!   `knot-resolver`, `kres-manager` and `kresctl --help` list every option of upstream's;
//! - purging removes every diversion: upstream's files are back as knot-resolver6 has them,
//!   and the running resolver is upstream's manager again, answering;
//! - installed (twice, so also upgraded) and purged again while the resolver is stopped, it
//!   stays stopped, and upstream's manager then starts on its own unit.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use testbed::machine::Machine;

const UNIT: &str = "knot-resolver.service";
const DAEMON: &str = env!("CARGO_BIN_EXE_knot-resolver");
const KRESCTL: &str = env!("CARGO_BIN_EXE_kresctl");
const SHIPPED_UNIT: &str = include_str!("../dist/systemd/knot-resolver.service");
const WAIT: Duration = Duration::from_secs(30);
const ADDRESS: &str = "192.0.2.7";
const CONFIG: &str = "workers: 2\nnetwork:\n  listen:\n    - interface: 127.0.0.1@53\n\
                      local-data:\n  addresses:\n    t.example: 192.0.2.7\n";

/// What the package diverts: knot-resolver6's path, and the name it is diverted to.
const DIVERTED: &[(&str, &str)] = &[
    ("/usr/bin/knot-resolver", "/usr/bin/knot-resolver.upstream"),
    ("/usr/bin/kresctl", "/usr/bin/kresctl.upstream"),
    ("/usr/bin/kres-manager", "/usr/bin/kres-manager.upstream"),
    (
        "/usr/lib/systemd/system/knot-resolver.service",
        "/usr/lib/systemd/system/knot-resolver.service.upstream",
    ),
    (
        "/usr/share/man/man8/kresctl.8.gz",
        "/usr/share/man/man8/kresctl.upstream.8.gz",
    ),
    (
        "/usr/share/bash-completion/completions/kresctl",
        "/usr/share/bash-completion/completions/kresctl.upstream",
    ),
];

/// Files only this package has.
const OURS_ONLY: &[&str] = &[
    "/usr/share/man/man8/knot-resolver.8.gz",
    "/usr/share/zsh/vendor-completions/_kresctl",
    "/usr/share/fish/vendor_completions.d/kresctl.fish",
];

/// knot-resolver6's files the test changes: its configuration, and the link that would
/// start the unit at boot (the bed removes it).
const CHANGED_BY_THE_BED: &[&str] = &[
    " c /etc/knot-resolver/config.yaml",
    " /usr/lib/systemd/system/multi-user.target.wants/knot-resolver.service",
];

/// A directory of the host for this test, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Build the package from this build's binaries and from the pages and completions
/// rendered here; the path of the .deb.
fn build_deb(scratch: &Path, date: &str) -> Result<PathBuf> {
    let prebuilt = scratch.join("prebuilt");
    for asset in kres_dist_gen::assets(date)? {
        let path = prebuilt.join(asset.path);
        std::fs::create_dir_all(path.parent().context("an asset's directory")?)?;
        std::fs::write(&path, &asset.contents)?;
    }
    std::fs::copy(DAEMON, prebuilt.join("knot-resolver"))?;
    std::fs::copy(KRESCTL, prebuilt.join("kresctl"))?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/debian/build-deb.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("--fast")
        .arg("--prebuilt")
        .arg(&prebuilt)
        .arg(scratch.join("out"))
        .output()
        .context("running build-deb.sh")?;
    let stdout = testbed::succeeded("build-deb.sh", &out)?;
    let deb = PathBuf::from(stdout.lines().last().context("no path printed")?.trim());
    if !deb.is_file() {
        bail!("build-deb.sh printed {deb:?}, which is not a file");
    }
    Ok(deb)
}

fn wait_answer(m: &Machine, what: &str) -> Result<()> {
    m.wait_for(&format!("{what}: t.example answered"), WAIT, || {
        Ok(m.dig_a("t.example")?
            .iter()
            .any(|a| a == ADDRESS)
            .then_some(()))
    })
}

/// The executable of the unit's main process, as its `/proc/PID/exe` link reads.
fn main_executable(m: &Machine) -> Result<String> {
    let pid = m.show(UNIT, "MainPID")?;
    let out = m.ok(&["readlink", &format!("/proc/{pid}/exe")])?;
    Ok(out.trim().to_owned())
}

/// Wait until the unit runs `executable` (a prefix of its path), is active and answers.
fn wait_running(m: &Machine, executable: &str) -> Result<()> {
    m.wait_for(&format!("{UNIT} active on {executable}"), WAIT, || {
        let active = m.show(UNIT, "ActiveState")? == "active";
        Ok((active && main_executable(m)?.starts_with(executable)).then_some(()))
    })?;
    wait_answer(m, executable)
}

/// `dpkg-divert --list` lines naming our package.
fn our_diversions(m: &Machine) -> Result<Vec<String>> {
    Ok(m.ok(&["dpkg-divert", "--list"])?
        .lines()
        .filter(|l| l.ends_with(" by knot-resolver-rs"))
        .map(str::to_owned)
        .collect())
}

fn exists(m: &Machine, path: &str) -> Result<bool> {
    Ok(m.run(&["test", "-e", path])?.status.success())
}

/// What a bash completion offers for `words` (the last one being completed), run the way
/// bash runs a `complete -F` function.
fn bash_completions(m: &Machine, words: &[&str]) -> Result<Vec<String>> {
    let script = format!(
        ". /usr/share/bash-completion/completions/kresctl; \
         COMP_WORDS=({words}); COMP_CWORD={cword}; \
         _kresctl_completion kresctl {current} {previous}; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        words = words.join(" "),
        cword = words.len() - 1,
        current = words[words.len() - 1],
        previous = words[words.len() - 2],
    );
    Ok(m.ok(&["bash", "-c", &script])?
        .lines()
        .map(str::to_owned)
        .collect())
}

/// Where the package is copied into the machine.
const DEB_INSIDE: &str = "/root/knot-resolver-rs.deb";

/// Installed while upstream's manager runs the resolver.
fn installed(m: &Machine, deb: &Path, date: &str) -> Result<()> {
    m.copy_in(deb, DEB_INSIDE)?;
    m.ok(&["dpkg", "-i", DEB_INSIDE])?;

    // Every file of upstream's we replace is diverted, and still there under its new name.
    let mut diversions = our_diversions(m)?;
    diversions.sort();
    let mut expected: Vec<String> = DIVERTED
        .iter()
        .map(|(path, to)| format!("diversion of {path} to {to} by knot-resolver-rs"))
        .collect();
    expected.sort();
    assert_eq!(diversions, expected);
    for (_, to) in DIVERTED {
        assert!(exists(m, to)?, "{to} is missing");
    }
    let upstream = m.ok(&["head", "-n", "1", "/usr/bin/knot-resolver.upstream"])?;
    assert!(upstream.starts_with("#! /usr/bin/python3"), "{upstream:?}");

    // Ours in their place: the resolver upstream was running restarted on our daemon.
    assert_eq!(
        m.ok(&["/usr/bin/knot-resolver", "-V"])?,
        format!("knot-resolver {}\n", kres_daemon::VERSION)
    );
    // kresctl names the kresd it finds after its own version.
    let version = m.ok(&["kresctl", "--version"])?;
    assert!(
        version.starts_with(&format!("kresctl {} ", kres_daemon::VERSION)),
        "{version:?}"
    );
    assert_eq!(
        m.ok(&["cat", "/usr/lib/systemd/system/knot-resolver.service"])?,
        SHIPPED_UNIT
    );
    wait_running(m, "/usr/bin/knot-resolver")?;
    let status = m.show(UNIT, "StatusText")?;
    assert!(status.starts_with("Ready: "), "status: {status:?}");
    // systemd passes over the diverted unit (`.upstream` is no unit type), without a word.
    let units = m.ok(&[
        "systemctl",
        "list-unit-files",
        "--no-legend",
        "knot-resolver*",
    ])?;
    assert_eq!(
        units
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .collect::<Vec<_>>(),
        [UNIT]
    );
    let pid1 = m.ok(&["journalctl", "-b", "-o", "cat", "_PID=1"])?;
    assert!(
        !pid1.contains(".upstream"),
        "systemd on a diverted file: {pid1}"
    );

    entry_points(m)?;

    // The pages are the ones this build renders; the completions are what kresctl prints.
    for (page, contents) in [
        ("knot-resolver", kres_dist_gen::daemon_page(date)?),
        ("kresctl", kres_dist_gen::kresctl_page(date)?),
    ] {
        let text = m.ok(&["zcat", &format!("/usr/share/man/man8/{page}.8.gz")])?;
        assert_eq!(text.as_bytes(), contents, "{page}.8");
    }
    for (shell, path) in [
        ("bash", "/usr/share/bash-completion/completions/kresctl"),
        ("zsh", "/usr/share/zsh/vendor-completions/_kresctl"),
        ("fish", "/usr/share/fish/vendor_completions.d/kresctl.fish"),
    ] {
        assert_eq!(
            m.ok(&["cat", path])?,
            m.ok(&["kresctl", "completion", shell])?,
            "{path}"
        );
    }
    let offered = bash_completions(m, &["kresctl", "con"])?;
    assert_eq!(offered, ["convert", "config"], "kresctl con<TAB>");
    let offered = bash_completions(m, &["kresctl", "config", "g"])?;
    assert_eq!(offered, ["get"], "kresctl config g<TAB>");

    // Stopped and started again by systemd.
    m.ok(&["systemctl", "stop", UNIT])?;
    assert_eq!(m.show(UNIT, "ActiveState")?, "inactive");
    assert_eq!(m.show(UNIT, "Result")?, "success");
    assert!(m.unit_processes(UNIT)?.is_empty());
    m.ok(&["systemctl", "start", UNIT])?;
    wait_running(m, "/usr/bin/knot-resolver")?;
    let status = m.show(UNIT, "StatusText")?;
    assert!(status.starts_with("Ready: 2 workers"), "status: {status:?}");
    Ok(())
}

/// The options a `--help` text lists (`-c`, `--config`, …), upstream's (argparse) or ours
/// (clap): every word of an option line that starts with a dash, up to its comma or value.
fn help_options(help: &str) -> std::collections::BTreeSet<String> {
    help.lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .flat_map(|l| l.split_whitespace().take_while(|w| w.starts_with('-')))
        .map(|w| {
            w.trim_end_matches(',')
                .split('=')
                .next()
                .unwrap_or(w)
                .to_owned()
        })
        .collect()
}

/// The commands upstream's kresctl lists in its usage (`{cache,completion,…}`).
fn upstream_commands(help: &str) -> Vec<String> {
    help.split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(list, _)| list.split(',').map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Upstream 6.5's entry points: `kres-manager` is our daemon under that name (it runs the
/// resolver, answering), and each of our `--help` lists every option of upstream's.
fn entry_points(m: &Machine) -> Result<()> {
    assert_eq!(
        m.ok(&["readlink", "-f", "/usr/bin/kres-manager"])?.trim(),
        "/usr/bin/knot-resolver"
    );
    for (ours, upstream) in [
        ("knot-resolver", "knot-resolver.upstream"),
        ("kres-manager", "kres-manager.upstream"),
        ("kresctl", "kresctl.upstream"),
    ] {
        let our_help = m.ok(&[ours, "--help"])?;
        let upstream_help = m.ok(&[upstream, "--help"])?;
        let theirs = help_options(&upstream_help);
        assert!(theirs.contains("--config"), "{upstream}: {upstream_help}");
        let ours_listed = help_options(&our_help);
        let missing: Vec<_> = theirs.difference(&ours_listed).collect();
        assert!(
            missing.is_empty(),
            "{ours} --help lacks {missing:?}:\n{our_help}"
        );
        assert!(
            our_help.contains(&format!("Usage: {ours} ")),
            "{ours} --help names it: {our_help}"
        );
        if ours == "kresctl" {
            let commands = upstream_commands(&upstream_help);
            assert!(commands.len() > 5, "{upstream_help}");
            let listed: Vec<&str> = our_help
                .lines()
                .filter_map(|l| l.split_whitespace().next())
                .collect();
            for command in &commands {
                assert!(
                    listed.contains(&command.as_str()),
                    "kresctl --help lacks {command}"
                );
            }
        }
    }
    // Started as kres-manager (a command line upstream's users have), it runs the resolver.
    m.ok(&["systemctl", "stop", UNIT])?;
    m.write(
        "/etc/systemd/system/knot-resolver.service.d/kres-manager.conf",
        "[Service]\nExecStart=\nExecStart=/usr/bin/kres-manager \
         --config=/etc/knot-resolver/config.yaml --loglevel=info\n",
    )?;
    m.ok(&["systemctl", "daemon-reload"])?;
    m.ok(&["systemctl", "start", UNIT])?;
    wait_running(m, "/usr/bin/knot-resolver")?;
    let status = m.show(UNIT, "StatusText")?;
    assert!(status.starts_with("Ready: 2 workers"), "status: {status:?}");
    m.ok(&["systemctl", "stop", UNIT])?;
    m.ok(&[
        "rm",
        "/etc/systemd/system/knot-resolver.service.d/kres-manager.conf",
    ])?;
    m.ok(&["systemctl", "daemon-reload"])?;
    m.ok(&["systemctl", "start", UNIT])?;
    wait_running(m, "/usr/bin/knot-resolver")
}

/// Purged while our daemon runs the resolver.
fn purged(m: &Machine) -> Result<()> {
    m.ok(&["dpkg", "--purge", "knot-resolver-rs"])?;
    assert_eq!(our_diversions(m)?, Vec::<String>::new());
    for (path, to) in DIVERTED {
        assert!(exists(m, path)?, "{path} did not come back");
        assert!(!exists(m, to)?, "{to} is left");
    }
    for path in OURS_ONLY {
        assert!(!exists(m, path)?, "{path} is left");
    }
    // Upstream's files, as the knot-resolver6 package has them (dpkg names each file that is
    // missing or differs, and exits 0 either way).
    let verify = m.ok(&["dpkg", "--verify", "knot-resolver6"])?;
    let differ: Vec<&str> = verify
        .lines()
        .filter(|l| !CHANGED_BY_THE_BED.iter().any(|c| l.ends_with(c)))
        .collect();
    assert!(
        differ.is_empty(),
        "knot-resolver6's files differ: {differ:#?}"
    );
    let first = m.ok(&["head", "-n", "1", "/usr/bin/knot-resolver"])?;
    assert!(first.starts_with("#! /usr/bin/python3"), "{first:?}");

    // The resolver that ran ours was restarted on upstream's manager.
    wait_running(m, "/usr/bin/python3")?;
    m.ok(&["systemctl", "stop", UNIT])?;
    assert_eq!(m.show(UNIT, "ActiveState")?, "inactive");
    Ok(())
}

/// With the resolver stopped, installing (twice: the second is dpkg's upgrade path) and
/// purging again leave it stopped; then upstream's manager starts on its own unit.
fn again_while_stopped(m: &Machine) -> Result<()> {
    for _ in 0..2 {
        m.ok(&["dpkg", "-i", DEB_INSIDE])?;
        assert_eq!(our_diversions(m)?.len(), DIVERTED.len());
        assert_eq!(
            m.ok(&["/usr/bin/knot-resolver", "-V"])?,
            format!("knot-resolver {}\n", kres_daemon::VERSION)
        );
        assert_eq!(m.show(UNIT, "ActiveState")?, "inactive");
    }
    m.ok(&["dpkg", "--purge", "knot-resolver-rs"])?;
    assert_eq!(our_diversions(m)?, Vec::<String>::new());
    assert_eq!(m.show(UNIT, "ActiveState")?, "inactive");
    m.ok(&["systemctl", "daemon-reload"])?;
    m.ok(&["systemctl", "start", UNIT])?;
    wait_running(m, "/usr/bin/python3")?;
    m.ok(&["systemctl", "stop", UNIT])?;
    assert_eq!(m.show(UNIT, "ActiveState")?, "inactive");
    Ok(())
}

#[test]
fn installs_over_knot_resolver6_and_purges_back_to_it() {
    let started = Instant::now();
    let scratch = Scratch(PathBuf::from(format!(
        "/var/tmp/kres-package-test-{}",
        std::process::id()
    )));
    let _ = std::fs::remove_dir_all(&scratch.0);
    std::fs::create_dir_all(&scratch.0).expect("scratch directory");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970");
    let date = kres_dist_gen::date_of(now.as_secs());
    let deb = build_deb(&scratch.0, &date).expect("building the package");
    let built = started.elapsed();

    let m = Machine::boot("package", &[]).expect("booting the machine");
    m.write("/etc/knot-resolver/config.yaml", CONFIG)
        .expect("configuration");
    // Upstream's manager running when the package is installed.
    m.ok(&["systemctl", "start", UNIT])
        .expect("upstream starts");
    wait_running(&m, "/usr/bin/python3").expect("upstream's manager answers");
    assert_eq!(
        our_diversions(&m).expect("dpkg-divert"),
        Vec::<String>::new()
    );

    installed(&m, &deb, &date).expect("the package installed");
    purged(&m).expect("the package purged");
    again_while_stopped(&m).expect("installed and purged again, the resolver stopped");
    eprintln!(
        "package: {} bytes, built in {built:.1?}; whole test {:.1?}",
        std::fs::metadata(&deb).map(|m| m.len()).unwrap_or(0),
        started.elapsed()
    );
}
