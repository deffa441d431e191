//! A real systemd as PID 1: a copy of the sid root filesystem booted with `systemd-nspawn`,
//! loopback only (`--private-network`). How it works on these machines (no systemd on the
//! host, hybrid cgroups): the container gets a pure cgroup2 tree
//! (`SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1`), nspawn runs unregistered (`--register=no
//! --keep-unit`) from a cgroup made for it by hand, and commands run inside through `nsenter`
//! into the container's namespaces, talking to systemd over its private socket (no D-Bus).
//!
//! Dropping a [`Machine`] halts it (SIGTERM to nspawn, an orderly shutdown), then removes its
//! cgroups and its copy of the root filesystem.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// How long a boot to `running` (or `degraded`) may take.
const BOOT_TIMEOUT: Duration = Duration::from_secs(60);

/// How long an orderly halt may take before nspawn is killed.
const HALT_TIMEOUT: Duration = Duration::from_secs(20);

/// The environment commands run with inside the machine.
const PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Units of the rootfs that must not start in the bed.
const MASKED: &[&str] = &["knot.service", "supervisor.service"];

/// A booted machine.
pub struct Machine {
    name: String,
    root: PathBuf,
    nspawn: Child,
    /// The container's PID 1, as the host sees it.
    leader: i32,
}

/// A file from the host bound read-only over a path inside the machine.
pub struct Bind<'a> {
    pub host: &'a Path,
    pub inside: &'a str,
}

impl Machine {
    /// Copy the sid rootfs and boot it. Nothing starts `knot-resolver.service` at boot; tests
    /// start it. `binds` replace files of the rootfs (our binaries over the package's).
    pub fn boot(name: &str, binds: &[Bind<'_>]) -> Result<Machine> {
        let nspawn_bin = which("systemd-nspawn")
            .context("systemd-nspawn is missing (apt-get install systemd-container)")?;
        let rootfs = crate::sid_rootfs()?;
        let name = format!("{name}-{}", std::process::id());
        let root = PathBuf::from(format!("/var/tmp/kres-machine-{name}"));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root)?;
        copy_tree(&rootfs, &root)?;
        prepare(&root)?;
        for (hierarchy, dir) in cgroup_dirs(&name) {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("creating the {hierarchy} cgroup {}", dir.display()))?;
        }
        let mut script = String::from("for d in");
        for (_, dir) in cgroup_dirs(&name) {
            script.push_str(&format!(" {}", dir.display()));
        }
        script.push_str("; do echo $$ > $d/cgroup.procs; done; exec \"$@\"");
        let mut cmd = Command::new("setsid");
        cmd.args(["sh", "-c", &script, "sh"])
            .arg(&nspawn_bin)
            .args([
                "--boot",
                "--register=no",
                "--keep-unit",
                "--private-network",
            ])
            .args(["--console=read-only", "--quiet"])
            .arg(format!("--directory={}", root.display()))
            .arg(format!("--machine={}", machine_name(&name)));
        for b in binds {
            cmd.arg(format!("--bind-ro={}:{}", b.host.display(), b.inside));
        }
        let nspawn = cmd
            .env("SYSTEMD_NSPAWN_UNIFIED_HIERARCHY", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting systemd-nspawn")?;
        let mut machine = Machine {
            name,
            root,
            nspawn,
            leader: 0,
        };
        machine.leader = machine.wait_for_leader()?;
        machine.wait_running()?;
        Ok(machine)
    }

    /// The container's PID 1: nspawn's child running systemd (nspawn is `setsid`'s exec; it
    /// has helper children for a moment while it sets the container up).
    fn wait_for_leader(&mut self) -> Result<i32> {
        let deadline = Instant::now() + BOOT_TIMEOUT;
        let nspawn = self.nspawn.id() as i32;
        loop {
            let children = crate::procs::children(nspawn);
            if let Some(child) = children.iter().find(|c| c.comm == "systemd") {
                return Ok(child.pid);
            }
            if let Some(status) = self.nspawn.try_wait()? {
                bail!("systemd-nspawn exited with {status} before the container started");
            }
            if Instant::now() >= deadline {
                bail!("the container did not start within {BOOT_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait for `systemctl is-system-running --wait` (running or degraded: both are booted).
    fn wait_running(&self) -> Result<()> {
        let deadline = Instant::now() + BOOT_TIMEOUT;
        loop {
            let out = self.run(&["systemctl", "is-system-running", "--wait"])?;
            let state = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if state == "running" || state == "degraded" {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("the machine did not finish booting: {state}");
            }
            // Before systemd opens its private socket, systemctl fails at once.
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Run a command inside the machine and wait for it.
    pub fn run(&self, argv: &[&str]) -> Result<Output> {
        Command::new("nsenter")
            .arg("-t")
            .arg(self.leader.to_string())
            .args(["-a", "env", "-i", PATH])
            .args(argv)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {argv:?} in the machine"))
    }

    /// Run a shell script inside the machine.
    pub fn sh(&self, script: &str) -> Result<Output> {
        self.run(&["sh", "-c", script])
    }

    /// Run a command that must succeed; its standard output.
    pub fn ok(&self, argv: &[&str]) -> Result<String> {
        crate::succeeded(format!("{argv:?}"), &self.run(argv)?)
    }

    /// Write a file inside the machine (through the host's view of its root).
    pub fn write(&self, inside: &str, contents: &str) -> Result<()> {
        let path = self.root.join(inside.trim_start_matches('/'));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&path, contents).with_context(|| format!("writing {inside}"))
    }

    /// Copy a file of the host into the machine (through the host's view of its root),
    /// keeping its permissions.
    pub fn copy_in(&self, host: &Path, inside: &str) -> Result<()> {
        let path = self.root.join(inside.trim_start_matches('/'));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::copy(host, &path)
            .with_context(|| format!("copying {} to {inside}", host.display()))?;
        Ok(())
    }

    /// A unit's properties (`systemctl show -p …`).
    pub fn show(&self, unit: &str, property: &str) -> Result<String> {
        let out = self.ok(&["systemctl", "show", "--value", "-p", property, unit])?;
        Ok(out.trim_end_matches('\n').to_owned())
    }

    /// The processes of a unit's cgroup: (pid inside the machine, comm).
    pub fn unit_processes(&self, unit: &str) -> Result<Vec<(i32, String)>> {
        let script = format!(
            "f=/sys/fs/cgroup/system.slice/{unit}/cgroup.procs; [ -f $f ] || exit 0; \
             for p in $(cat $f); do echo \"$p $(cat /proc/$p/comm 2>/dev/null)\"; done"
        );
        let out = self.sh(&script)?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let (pid, comm) = l.split_once(' ')?;
                Some((pid.parse().ok()?, comm.to_owned()))
            })
            .collect())
    }

    /// Ask `name` for its A records from inside the machine (kdig on 127.0.0.1:53).
    pub fn dig_a(&self, name: &str) -> Result<Vec<String>> {
        Ok(crate::short_answers(&self.run(&crate::kdig_a(name))?))
    }

    /// Run `f` on a thread inside the machine's network namespace: sockets it creates (a
    /// [`crate::load::Load`]'s, say) talk to the machine's loopback, whatever thread uses
    /// them later.
    pub fn in_network<T: Send>(&self, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
        let netns = std::fs::File::open(format!("/proc/{}/ns/net", self.leader))
            .context("opening the machine's network namespace")?;
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    nix::sched::setns(&netns, nix::sched::CloneFlags::CLONE_NEWNET)
                        .context("entering the machine's network namespace")?;
                    f()
                })
                .join()
                .map_err(|_| anyhow::anyhow!("the thread in the machine's network panicked"))?
        })
    }

    /// Poll `check` until it returns `Some`, or fail after `timeout` saying `what`.
    pub fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        check: impl FnMut() -> Result<Option<T>>,
    ) -> Result<T> {
        crate::wait_for(what, timeout, check)
    }

    /// The journal of a unit as JSON objects, one per entry; only the entries after
    /// `after_cursor` (a `__CURSOR` value) when one is given.
    pub fn journal(
        &self,
        unit: &str,
        after_cursor: Option<&str>,
    ) -> Result<Vec<serde_json::Value>> {
        let after = after_cursor.map(|c| format!("--after-cursor={c}"));
        let mut argv = vec!["journalctl", "-u", unit, "-o", "json", "--no-pager"];
        argv.extend(after.as_deref());
        let out = self.ok(&argv)?;
        Ok(out
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect())
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.nspawn.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + HALT_TIMEOUT;
        while Instant::now() < deadline {
            if matches!(self.nspawn.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.nspawn.kill();
        let _ = self.nspawn.wait();
        for (_, dir) in cgroup_dirs(&self.name) {
            remove_cgroup(&dir);
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The cgroups nspawn is started in, one per hierarchy it uses.
fn cgroup_dirs(name: &str) -> Vec<(&'static str, PathBuf)> {
    ["unified", "systemd"]
        .into_iter()
        .map(|h| {
            (
                h,
                PathBuf::from(format!("/sys/fs/cgroup/{h}/kres-machine-{name}")),
            )
        })
        .collect()
}

/// Remove a cgroup tree, deepest first (only empty cgroups can be removed).
fn remove_cgroup(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_cgroup(&entry.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Machine names are host names: at most 64 characters of letters, digits and dashes.
fn machine_name(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(64)
        .collect()
}

/// Copy the rootfs, leaving out the scratch space other tests use inside it.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    let status = Command::new("sh")
        .arg("-c")
        .arg(
            "tar -C \"$1\" --one-file-system --exclude=./tmp/* --exclude=./opt/kr-bin/* -cf - . \
             | tar -C \"$2\" -xf -",
        )
        .arg("sh")
        .arg(from)
        .arg(to)
        .status()
        .context("copying the rootfs")?;
    if !status.success() {
        bail!("copying the rootfs failed with {status}");
    }
    Ok(())
}

/// Mask what must not run, and keep the package's unit from starting at boot.
fn prepare(root: &Path) -> Result<()> {
    let units = root.join("etc/systemd/system");
    for unit in MASKED {
        let link = units.join(unit);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("/dev/null", &link)?;
    }
    for dir in ["etc/systemd/system", "usr/lib/systemd/system"] {
        let wants = root.join(dir).join("multi-user.target.wants");
        let _ = std::fs::remove_file(wants.join("knot-resolver.service"));
    }
    Ok(())
}

fn which(program: &str) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .with_context(|| format!("{program} not found on PATH"))
}
