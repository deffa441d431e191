//! The test bed: real Knot Resolver 6 for integration tests and benchmarks.
//!
//! Where a `kresd` 6 is on `$PATH`, binaries run natively. Otherwise the Debian sid root
//! filesystem from `provision-rootfs.sh` is used (provisioned on first use, cached outside the
//! clone): each launched program runs under `unshare --mount` in a private mount namespace
//! that mounts `/proc`, `/dev` and our build directory inside the rootfs and then `chroot`s,
//! so nothing stays mounted when it exits. Every launched tree carries a marker environment
//! variable, so teardown can find and kill every descendant and tests can prove none is left.
//! Setting up the bed either works or fails loudly: tests never skip silently.

pub mod chaos;
pub mod dns;
pub mod etcd;
pub mod http;
pub mod knot;
pub mod load;
pub mod machine;
pub mod notify;
pub mod podman;
pub mod procs;
pub mod webdriver;

use std::ffi::{OsStr, OsString};
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// Environment variable carried by every process a test launches.
pub const MARKER_VAR: &str = "KRES_TESTBED_MARKER";

/// How programs are run.
#[derive(Debug, Clone)]
pub enum Mode {
    /// kresd 6 is installed on this machine.
    Native,
    /// Inside the Debian sid rootfs at this path.
    Chroot { rootfs: PathBuf },
}

/// The test bed, set up once per test process.
#[derive(Debug)]
pub struct Bed {
    pub mode: Mode,
    /// Host directory under which test directories are made.
    scratch_host: PathBuf,
    /// The same directory as the launched programs see it.
    scratch_bed: PathBuf,
}

/// A directory a test owns, seen from the host and from inside the bed.
#[derive(Debug, Clone)]
pub struct TestDir {
    pub host: PathBuf,
    pub bed: PathBuf,
}

impl TestDir {
    /// A path below the directory: (host path, bed path).
    pub fn join(&self, rel: &str) -> (PathBuf, PathBuf) {
        (self.host.join(rel), self.bed.join(rel))
    }

    pub fn host(&self, rel: &str) -> PathBuf {
        self.host.join(rel)
    }

    pub fn bed(&self, rel: &str) -> PathBuf {
        self.bed.join(rel)
    }
}

static BED: OnceLock<std::result::Result<Bed, String>> = OnceLock::new();
static COUNTER: AtomicU32 = AtomicU32::new(0);
static PORT_LOCK: Mutex<()> = Mutex::new(());

/// Path of the provisioning script in the repository.
///
/// Found through the package cargo is running (its `CARGO_MANIFEST_DIR` at run time: the
/// root crate, `bench/` or this crate), not only where this crate was compiled: a target
/// directory shared by clones at different paths reuses this crate's build, and the path
/// compiled in may name a clone that is gone.
fn provision_script() -> PathBuf {
    let compiled = Path::new(env!("CARGO_MANIFEST_DIR")).join("provision-rootfs.sh");
    let Some(running) = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from) else {
        return compiled;
    };
    [
        running.join("tests/testbed/provision-rootfs.sh"),
        running.join("../tests/testbed/provision-rootfs.sh"),
        running.join("provision-rootfs.sh"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .unwrap_or(compiled)
}

/// The Debian sid root filesystem, provisioned (once, cached) by `provision-rootfs.sh`.
pub fn sid_rootfs() -> Result<PathBuf> {
    static ROOTFS: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let provisioned = ROOTFS.get_or_init(|| provision().map_err(|e| format!("{e:#}")));
    match provisioned {
        Ok(path) => Ok(path.clone()),
        Err(e) => bail!("{e}"),
    }
}

fn provision() -> Result<PathBuf> {
    let out = Command::new("bash")
        .arg(provision_script())
        .stderr(Stdio::inherit())
        .output()
        .context("running provision-rootfs.sh")?;
    if !out.status.success() {
        bail!("provision-rootfs.sh failed with {}", out.status);
    }
    let rootfs = PathBuf::from(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or("")
            .trim(),
    );
    if !rootfs.join("usr/sbin/kresd").exists() {
        bail!("rootfs {} has no usr/sbin/kresd", rootfs.display());
    }
    Ok(rootfs)
}

impl Bed {
    /// The bed, set up on first use. An error here fails the test.
    pub fn get() -> Result<&'static Bed> {
        match BED.get_or_init(|| Bed::setup().map_err(|e| format!("{e:#}"))) {
            Ok(bed) => Ok(bed),
            Err(e) => bail!("test bed unavailable: {e}"),
        }
    }

    fn setup() -> Result<Bed> {
        if native_kresd6() {
            let scratch = std::env::temp_dir().join(format!("kr-testbed-{}", std::process::id()));
            std::fs::create_dir_all(&scratch)?;
            return Ok(Bed {
                mode: Mode::Native,
                scratch_host: scratch.clone(),
                scratch_bed: scratch,
            });
        }
        let rootfs = sid_rootfs()?;
        remove_stale_dirs(&rootfs.join("tmp"), "kr-testbed-");
        let rel = PathBuf::from(format!("tmp/kr-testbed-{}", std::process::id()));
        let scratch_host = rootfs.join(&rel);
        std::fs::create_dir_all(&scratch_host)?;
        std::fs::create_dir_all(rootfs.join("opt/kr-bin"))?;
        Ok(Bed {
            mode: Mode::Chroot { rootfs },
            scratch_host,
            scratch_bed: Path::new("/").join(rel),
        })
    }

    /// A fresh directory for one test.
    pub fn test_dir(&self, name: &str) -> Result<TestDir> {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let leaf = format!("{name}-{n}");
        let dir = TestDir {
            host: self.scratch_host.join(&leaf),
            bed: self.scratch_bed.join(&leaf),
        };
        std::fs::create_dir_all(&dir.host)?;
        Ok(dir)
    }

    /// The host path of a path inside the bed.
    pub fn host_path(&self, bed_path: &Path) -> PathBuf {
        match &self.mode {
            Mode::Native => bed_path.to_owned(),
            Mode::Chroot { rootfs } => rootfs.join(bed_path.strip_prefix("/").unwrap_or(bed_path)),
        }
    }

    /// Launch `program` (a host path, e.g. `env!("CARGO_BIN_EXE_knot-resolver")`) with `args`
    /// inside the bed. `env` is added to a minimal environment (PATH, the marker).
    pub fn launch(
        &self,
        program: &Path,
        args: &[&OsStr],
        env: &[(&str, &OsStr)],
    ) -> Result<Launched> {
        self.spawn_in_bed(Program::Ours(program), args, env)
    }

    /// As [`Bed::launch`], under a limit on open descriptors (`soft`, `hard`), as a service
    /// manager would set it (util-linux `prlimit` around the launcher).
    pub fn launch_with_open_files(
        &self,
        program: &Path,
        args: &[&OsStr],
        env: &[(&str, &OsStr)],
        (soft, hard): (u64, u64),
    ) -> Result<Launched> {
        let marker = self.marker();
        let launcher = self.launcher(Program::Ours(program), args)?;
        let mut cmd = Command::new("prlimit");
        cmd.arg(format!("--nofile={soft}:{hard}"))
            .arg("--")
            .arg(launcher.get_program())
            .args(launcher.get_args());
        self.finish_launch(&mut cmd, env, marker)
    }

    /// Launch a program that is part of the bed itself (`/usr/sbin/kresd`, `/usr/bin/knot-resolver`).
    pub fn launch_installed(
        &self,
        bed_program: &Path,
        args: &[&OsStr],
        env: &[(&str, &OsStr)],
    ) -> Result<Launched> {
        self.spawn_in_bed(Program::Installed(bed_program), args, env)
    }

    /// Build the launcher for `program` (directly, or through `unshare` + `chroot`) and start it.
    fn spawn_in_bed(
        &self,
        program: Program<'_>,
        args: &[&OsStr],
        env: &[(&str, &OsStr)],
    ) -> Result<Launched> {
        let marker = self.marker();
        let mut cmd = self.launcher(program, args)?;
        self.finish_launch(&mut cmd, env, marker)
    }

    /// A new marker that tells the launched tree's processes apart.
    fn marker(&self) -> String {
        new_marker()
    }

    /// The command that runs `program` with `args` in the bed.
    fn launcher(&self, program: Program<'_>, args: &[&OsStr]) -> Result<Command> {
        let cmd = match (&self.mode, program) {
            (Mode::Native, Program::Ours(path) | Program::Installed(path)) => {
                let mut c = Command::new(path);
                c.args(args);
                c
            }
            (Mode::Chroot { rootfs }, Program::Installed(path)) => {
                let mut c = Command::new("unshare");
                c.args([
                    "--mount",
                    "--propagation",
                    "private",
                    "--",
                    "sh",
                    "-c",
                    CHROOT_SCRIPT_INSTALLED,
                    "sh",
                ]);
                c.arg(rootfs).arg(path).args(args);
                c
            }
            (Mode::Chroot { rootfs }, Program::Ours(path)) => {
                let dir = path.parent().context("program has no directory")?;
                let name = path.file_name().context("program has no name")?;
                let mut c = Command::new("unshare");
                c.args([
                    "--mount",
                    "--propagation",
                    "private",
                    "--",
                    "sh",
                    "-c",
                    CHROOT_SCRIPT,
                    "sh",
                ]);
                c.arg(rootfs)
                    .arg(dir)
                    .arg(Path::new("/opt/kr-bin").join(name))
                    .args(args);
                c
            }
        };
        Ok(cmd)
    }

    fn finish_launch(
        &self,
        cmd: &mut Command,
        env: &[(&str, &OsStr)],
        marker: String,
    ) -> Result<Launched> {
        finish_launch(cmd, env, marker)
    }

    /// Run a program of the bed to completion (kdig, kresctl of upstream) and return stdout.
    pub fn run_installed(&self, bed_program: &str, args: &[&str]) -> Result<std::process::Output> {
        let mut cmd = match &self.mode {
            Mode::Native => Command::new(bed_program),
            Mode::Chroot { rootfs } => {
                let mut c = Command::new("chroot");
                c.arg(rootfs).arg(bed_program);
                c
            }
        };
        cmd.args(args)
            .output()
            .with_context(|| format!("running {bed_program}"))
    }
}

/// A new marker that tells a launched tree's processes apart.
fn new_marker() -> String {
    format!(
        "kr-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    )
}

/// Launch a program of the host itself (not of the bed: etcd, installed by `tests/run.sh`),
/// with the same minimal environment, marker and collected output as [`Bed::launch`].
pub fn launch_on_host(program: &str, args: &[OsString]) -> Result<Launched> {
    let mut cmd = Command::new(program);
    cmd.args(args);
    finish_launch(&mut cmd, &[], new_marker())
        .with_context(|| format!("starting {program} (is it installed?)"))
}

fn finish_launch(cmd: &mut Command, env: &[(&str, &OsStr)], marker: String) -> Result<Launched> {
    // Standard output and standard error into one pipe, read as one stream of lines
    // (logging goes to stdout by default, as upstream's; an unread pipe would block it).
    let (reader, writer) = std::io::pipe().context("creating the output pipe")?;
    cmd.env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env(MARKER_VAR, &marker)
        .stdin(Stdio::null())
        .stdout(writer.try_clone().context("duplicating the output pipe")?)
        .stderr(writer);
    if let Some(log) = std::env::var_os("KRES_LOG") {
        cmd.env("KRES_LOG", log);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().context("spawning the launcher")?;
    // The command holds our write ends until the caller drops it, right after this
    // returns; from then on EOF comes when the launched tree has closed its copies.
    let output = Output::collect(Some(reader));
    Ok(Launched {
        child: Some(child),
        marker,
        output,
    })
}

/// Remove the directories in `tmp` named `<prefix><pid>` or `<prefix><pid>-…` of test
/// processes that no longer exist (killed before they could clean up), so runs do not pile
/// up data (the cached rootfs's scratch, etcd clusters). A live process's are never touched.
pub(crate) fn remove_stale_dirs(tmp: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
        if !alive {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// What the bed launches.
#[derive(Clone, Copy)]
enum Program<'a> {
    /// One of our binaries (a host path): its directory is mounted into the bed.
    Ours(&'a Path),
    /// A program installed in the bed (a bed path).
    Installed(&'a Path),
}

/// Mounts /proc, /dev and the build directory inside the rootfs, then chroots into it.
/// Arguments: rootfs, build dir, program inside the rootfs, its arguments.
const CHROOT_SCRIPT: &str = r#"
set -e
root=$1; bindir=$2; shift 2
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount --bind "$bindir" "$root/opt/kr-bin"
exec chroot "$root" "$@"
"#;

const CHROOT_SCRIPT_INSTALLED: &str = r#"
set -e
root=$1; shift
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
exec chroot "$root" "$@"
"#;

fn native_kresd6() -> bool {
    if std::env::var_os("KRES_TESTBED_FORCE_ROOTFS").is_some() {
        return false;
    }
    Command::new("kresd")
        .arg("--version")
        .output()
        .map(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("version 6."))
        .unwrap_or(false)
}

/// A free port on 127.0.0.1 for both UDP and TCP. Ports handed out by one test process are
/// never handed out twice.
pub fn free_port() -> Result<u16> {
    static USED: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let _guard = PORT_LOCK
        .lock()
        .map_err(|_| anyhow::anyhow!("port lock poisoned"))?;
    for _ in 0..100 {
        let udp = UdpSocket::bind("127.0.0.1:0")?;
        let port = udp.local_addr()?.port();
        if TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        let mut used = USED
            .lock()
            .map_err(|_| anyhow::anyhow!("port list poisoned"))?;
        if used.contains(&port) {
            continue;
        }
        used.push(port);
        return Ok(port);
    }
    bail!("no free port found")
}

/// A port free on every address (`0.0.0.0`) for both UDP and TCP, for a server that listens
/// on a wildcard address. It is taken below the kernel's ephemeral range (32768 and up), so
/// no client socket of a test running beside this one is given it later, as one can be given
/// a port of [`free_port`]; ports handed out by one test process are never handed out twice.
pub fn free_wildcard_port() -> Result<u16> {
    static NEXT: Mutex<Option<u16>> = Mutex::new(None);
    const RANGE: std::ops::Range<u16> = 20_000..32_000;
    let _guard = PORT_LOCK
        .lock()
        .map_err(|_| anyhow::anyhow!("port lock poisoned"))?;
    let mut next = NEXT
        .lock()
        .map_err(|_| anyhow::anyhow!("port cursor poisoned"))?;
    // Processes running at once start at different places of the range.
    let start = RANGE.start + (std::process::id() % u32::from(RANGE.end - RANGE.start)) as u16;
    let mut port = next.unwrap_or(start);
    for _ in 0..(RANGE.end - RANGE.start) {
        port = if port + 1 >= RANGE.end {
            RANGE.start
        } else {
            port + 1
        };
        if UdpSocket::bind(("0.0.0.0", port)).is_ok()
            && TcpListener::bind(("0.0.0.0", port)).is_ok()
        {
            *next = Some(port);
            return Ok(port);
        }
    }
    bail!("no free port found below the ephemeral range")
}

/// The collected stderr of a launched process, for failure messages and log assertions.
#[derive(Clone)]
pub struct Output {
    lines: std::sync::Arc<Mutex<Vec<String>>>,
    tx: std::sync::Arc<Mutex<Vec<mpsc::Sender<String>>>>,
    /// Receives once the stream reached EOF.
    eof: std::sync::Arc<Mutex<Option<mpsc::Receiver<()>>>>,
}

impl Output {
    fn collect(stream: Option<impl std::io::Read + Send + 'static>) -> Output {
        let (eof_tx, eof_rx) = mpsc::channel::<()>();
        let out = Output {
            lines: Default::default(),
            tx: Default::default(),
            eof: std::sync::Arc::new(Mutex::new(Some(eof_rx))),
        };
        if let Some(stream) = stream {
            let o = out.clone();
            std::thread::spawn(move || {
                // Dropped at EOF, which disconnects the receiver.
                let _eof = eof_tx;
                use std::io::BufRead;
                let reader = std::io::BufReader::new(stream);
                for line in reader.split(b'\n').map_while(|l| l.ok()) {
                    let line = String::from_utf8_lossy(&line).into_owned();
                    if std::env::var_os("KRES_TESTBED_ECHO").is_some() {
                        eprintln!("| {line}");
                    }
                    // Stored and sent under the lines lock, so a waiter that checks the
                    // stored lines and subscribes under that lock sees every line once.
                    if let Ok(mut l) = o.lines.lock() {
                        if let Ok(mut subs) = o.tx.lock() {
                            subs.retain(|s| s.send(line.clone()).is_ok());
                        }
                        l.push(line);
                    }
                }
            });
        }
        out
    }

    /// Wait until every writer closed the stream (bounded: a leaked grandchild may hold it).
    pub fn wait_eof(&self, timeout: Duration) -> bool {
        let rx = self.eof.lock().ok().and_then(|mut e| e.take());
        match rx {
            Some(rx) => matches!(
                rx.recv_timeout(timeout),
                Err(mpsc::RecvTimeoutError::Disconnected) | Ok(())
            ),
            None => true,
        }
    }

    /// Everything written so far.
    pub fn text(&self) -> String {
        self.lines.lock().map(|l| l.join("\n")).unwrap_or_default()
    }

    /// How many lines so far contain `needle`.
    pub fn count(&self, needle: &str) -> usize {
        self.lines
            .lock()
            .map(|l| l.iter().filter(|l| l.contains(needle)).count())
            .unwrap_or(0)
    }

    /// Wait until at least `n` lines contain `needle` (including lines already written).
    pub fn wait_for_count(&self, needle: &str, n: usize, timeout: Duration) -> Result<()> {
        let (tx, rx) = mpsc::channel();
        let mut seen = {
            let lines = self.lines.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
            let seen = lines.iter().filter(|l| l.contains(needle)).count();
            if seen >= n {
                return Ok(());
            }
            self.tx
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .push(tx);
            seen
        };
        let deadline = std::time::Instant::now() + timeout;
        while seen < n {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) if l.contains(needle) => seen += 1,
                Ok(_) => {}
                Err(_) => bail!(
                    "fewer than {n} lines containing {needle:?} within {timeout:?}; output:\n{}",
                    self.text()
                ),
            }
        }
        Ok(())
    }

    /// Wait until a line containing `needle` appears (including lines already written).
    pub fn wait_for(&self, needle: &str, timeout: Duration) -> Result<String> {
        let (tx, rx) = mpsc::channel();
        {
            let lines = self.lines.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
            if let Some(l) = lines.iter().find(|l| l.contains(needle)) {
                return Ok(l.clone());
            }
            self.tx
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .push(tx);
        }
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) if l.contains(needle) => return Ok(l),
                Ok(_) => continue,
                Err(_) => bail!(
                    "no line containing {needle:?} within {timeout:?}; output:\n{}",
                    self.text()
                ),
            }
        }
    }
}

/// A launched process tree. Dropping it kills every process carrying its marker.
pub struct Launched {
    child: Option<Child>,
    pub marker: String,
    pub output: Output,
}

impl Launched {
    /// Pid of the launched program (the launcher `exec`s into it).
    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }

    pub fn signal(&self, signal: nix::sys::signal::Signal) -> Result<()> {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), signal)?;
        Ok(())
    }

    /// Wait for the program to exit; its exit status.
    pub fn wait(&mut self, timeout: Duration) -> Result<std::process::ExitStatus> {
        let mut child = self.child.take().context("already waited")?;
        let (tx, rx) = mpsc::channel();
        let handle = std::thread::spawn(move || {
            let r = child.wait();
            let _ = tx.send(());
            (child, r)
        });
        match rx.recv_timeout(timeout) {
            Ok(()) => {
                let (_, status) = handle
                    .join()
                    .map_err(|_| anyhow::anyhow!("waiter panicked"))?;
                self.output.wait_eof(Duration::from_secs(5));
                Ok(status?)
            }
            Err(_) => {
                procs::kill_marked(&self.marker);
                let _ = handle.join();
                bail!(
                    "did not exit within {timeout:?}; output:\n{}",
                    self.output.text()
                )
            }
        }
    }

    /// Processes of this tree still alive (not zombies), other than the launched program.
    pub fn descendants(&self) -> Vec<procs::ProcInfo> {
        procs::marked(&self.marker)
            .into_iter()
            .filter(|p| p.pid != self.pid())
            .collect()
    }

    /// All live processes of the tree, the launched program included.
    pub fn tree(&self) -> Vec<procs::ProcInfo> {
        procs::marked(&self.marker)
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        procs::kill_marked(&self.marker);
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Poll `check` until it returns `Some`, or fail after `timeout` saying `what`.
/// `out`'s standard output when it succeeded; otherwise an error saying `what` failed, with
/// its status and everything it printed.
pub fn succeeded(what: impl std::fmt::Display, out: &std::process::Output) -> Result<String> {
    if !out.status.success() {
        anyhow::bail!(
            "{what} failed with {}: {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The command line asking `name`'s A records of the resolver on 127.0.0.1:53 (kdig, short
/// answers, one try); read its output with [`short_answers`].
pub fn kdig_a(name: &str) -> [&str; 7] {
    [
        "kdig",
        "+short",
        "+time=2",
        "+retry=0",
        "@127.0.0.1",
        name,
        "A",
    ]
}

/// The answers `kdig +short` printed (its comment lines left out).
pub fn short_answers(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with(';'))
        .map(str::to_owned)
        .collect()
}

pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check()? {
            return Ok(v);
        }
        if std::time::Instant::now() >= deadline {
            bail!("{what}: not within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Write a file, creating parent directories.
pub fn write(path: &Path, text: &str) -> Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// OsString helper for argument lists.
pub fn os(s: impl AsRef<OsStr>) -> OsString {
    s.as_ref().to_owned()
}

/// A self-signed certificate and key (P-256, one day) for `cn`, made with the host's openssl,
/// written to `cert` and `key`.
pub fn self_signed_cert(cn: &str, cert: &Path, key: &Path) -> Result<()> {
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
        ])
        .arg("-subj")
        .arg(format!("/CN={cn}"))
        .arg("-keyout")
        .arg(key)
        .arg("-out")
        .arg(cert)
        .output()
        .context("running openssl (install it: apt-get install openssl)")?;
    if !made.status.success() {
        bail!("openssl failed: {}", String::from_utf8_lossy(&made.stderr));
    }
    Ok(())
}
