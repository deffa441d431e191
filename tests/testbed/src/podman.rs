//! A real container runtime: podman (4.3 on Debian 12) with runc, loopback only. How it works
//! on these machines (no registry reachable, hybrid cgroups, a hard limit of 20,000 open
//! files, no systemd on the host):
//!
//! - the base image is imported from the sid root filesystem of [`crate::sid_rootfs`], once
//!   per provisioning (tagged with the rootfs's provisioning time) and reused afterwards;
//! - `/etc/containers/containers.conf` gets the keys podman needs here (ulimits it may set,
//!   runc rather than crun, cgroupfs, a file events log), written only when they differ;
//! - images are built with `--format docker` (the OCI format drops `HEALTHCHECK`),
//!   `--network none` and `--pull=never`: a build never reaches a registry;
//! - every container and every played pod gets `--network none`: loopback only, never the
//!   default bridge, slirp4netns or the host's network;
//! - health checks are only stored by `podman run` (their timers need systemd): tests run
//!   them with [`Container::health`];
//! - `podman kube play` (4.3) turns a liveness probe into the health check and ignores
//!   readiness probes; it would publish container ports on the host (refused on `--network
//!   none`: a played file leaves `ports` out); it makes `emptyDir`s (even `medium: Memory`),
//!   ConfigMaps and Secrets named volumes on disk, writes a Secret's `data` undecoded, panics
//!   on a `secret` volume without an explicit `optional`, and `podman stop` refuses every exec
//!   while it waits (signal with [`Container::kill`] to watch a graceful stop).
//!
//! Dropping a [`Container`] removes it with its anonymous volumes, dropping an [`Image`]
//! removes the image, dropping a [`Kube`] takes its pods down and removes what playing them
//! made (named volumes, secrets), and dropping a [`Context`] removes its directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant, UNIX_EPOCH};

use anyhow::{bail, Context as _, Result};

use crate::procs::ProcInfo;

/// Where podman reads the engine's configuration.
const CONTAINERS_CONF: &str = "/etc/containers/containers.conf";

/// The base image's name; its tag is the rootfs's provisioning time and [`BASE_RECIPE`].
const BASE_REPOSITORY: &str = "localhost/kres-sid-base";

/// The version of how the base image is imported: a change of [`BASE_CHANGES`] bumps it, so
/// that an image imported the old way is not reused.
const BASE_RECIPE: u32 = 2;

/// Image settings given to `podman import` (an imported root filesystem has none): the
/// `PATH` Debian's own images set, without which `podman kube play` finds no command.
const BASE_CHANGES: &[&str] =
    &["ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"];

/// Serializes base-image imports between test processes.
const IMPORT_LOCK: &str = "/var/tmp/kres-podman-base.lock";

/// Serializes played pods between test processes: podman names the volumes and secrets of a
/// played file after the file's own names, the same in every run.
const KUBE_LOCK: &str = "/var/tmp/kres-podman-kube.lock";

/// How long `podman rm` waits for a container before killing it at teardown.
const REMOVE_GRACE: &str = "0";

/// The podman bed, set up once per test process.
#[derive(Debug)]
pub struct Podman {
    /// The base image imported from the sid rootfs (`localhost/kres-sid-base:STAMP-RECIPE`).
    pub base: String,
}

impl Podman {
    /// The bed, set up on first use: podman and runc installed, containers.conf fitted, the
    /// base image imported (or found). An error here fails the test.
    pub fn get() -> Result<&'static Podman> {
        static PODMAN: OnceLock<Result<Podman, String>> = OnceLock::new();
        match PODMAN.get_or_init(|| Podman::setup().map_err(|e| format!("{e:#}"))) {
            Ok(p) => Ok(p),
            Err(e) => bail!("podman bed unavailable: {e}"),
        }
    }

    fn setup() -> Result<Podman> {
        for program in ["podman", "runc"] {
            let found = Command::new(program)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !found {
                bail!("{program} is missing (apt-get install podman runc)");
            }
        }
        fit_containers_conf(Path::new(CONTAINERS_CONF))?;
        let base = import_base()?;
        Ok(Podman { base })
    }
}

/// The keys of containers.conf the bed needs, by table.
fn needed_conf() -> Vec<(&'static str, &'static str, toml::Value)> {
    let ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
        .into_iter()
        .map(|u| toml::Value::String(u.to_owned()))
        .collect();
    let s = |v: &str| toml::Value::String(v.to_owned());
    vec![
        // podman's defaults ask for more open files than the host allows
        // ("setrlimit RLIMIT_NOFILE: Operation not permitted").
        ("containers", "default_ulimits", toml::Value::Array(ulimits)),
        // crun 1.8 refuses hybrid cgroups.
        ("engine", "runtime", s("runc")),
        // No systemd on the host: neither its cgroup manager nor the journal.
        ("engine", "cgroup_manager", s("cgroupfs")),
        ("engine", "events_logger", s("file")),
    ]
}

/// Set the needed keys in `path`, keeping every other key; write only when one differs.
fn fit_containers_conf(path: &Path) -> Result<()> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let Some(fitted) = fitted_conf(&text).with_context(|| format!("in {}", path.display()))? else {
        return Ok(());
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, fitted).with_context(|| format!("writing {}", path.display()))
}

/// `text` (a containers.conf) with the needed keys set, or `None` when it has them all.
fn fitted_conf(text: &str) -> Result<Option<String>> {
    let mut conf: toml::Table = text.parse().context("parsing containers.conf")?;
    let mut changed = false;
    for (table, key, value) in needed_conf() {
        let entry = conf
            .entry(table)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let toml::Value::Table(t) = entry else {
            bail!("[{table}] is not a table");
        };
        if t.get(key) != Some(&value) {
            t.insert(key.to_owned(), value);
            changed = true;
        }
    }
    if !changed {
        return Ok(None);
    }
    Ok(Some(
        toml::to_string(&conf).context("serializing containers.conf")?,
    ))
}

/// The base image for the current rootfs: found when already imported, imported otherwise
/// (10–15 s), older imports removed.
fn import_base() -> Result<String> {
    let rootfs = crate::sid_rootfs()?;
    let stamp = std::fs::metadata(rootfs.join(".provisioned"))
        .and_then(|m| m.modified())
        .context("reading the rootfs's provisioning stamp")?
        .duration_since(UNIX_EPOCH)
        .context("provisioning stamp before 1970")?
        .as_secs();
    let image = format!("{BASE_REPOSITORY}:{stamp}-{BASE_RECIPE}");
    let _lock = lock(IMPORT_LOCK)?;
    if exists(&["image", "exists", &image])? {
        return Ok(image);
    }
    let mut tar = Command::new("tar")
        .arg("-C")
        .arg(&rootfs)
        .args([
            "--one-file-system",
            "--exclude=./tmp/*",
            "--exclude=./opt/kr-bin/*",
            "-c",
            ".",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .context("starting tar")?;
    let archive = tar.stdout.take().context("tar's output")?;
    let mut import = Command::new("podman");
    import.arg("import");
    for change in BASE_CHANGES {
        import.args(["--change", change]);
    }
    let imported = import
        .args(["-", &image])
        .stdin(archive)
        .output()
        .context("running podman import")?;
    let tarred = tar.wait().context("waiting for tar")?;
    if !tarred.success() || !imported.status.success() {
        bail!(
            "importing {} as {image} failed (tar: {tarred}, podman: {}): {}",
            rootfs.display(),
            imported.status,
            String::from_utf8_lossy(&imported.stderr)
        );
    }
    let listed = checked(&[
        "images",
        "--format",
        "{{.Repository}}:{{.Tag}}",
        BASE_REPOSITORY,
    ])?;
    for old in listed.lines().filter(|l| *l != image) {
        // An image still used by a container stays; the next import tries again.
        let _ = podman(&["rmi", old]);
    }
    Ok(image)
}

/// Hold an exclusive lock on `path` (created if missing) until the result is dropped.
fn lock(path: &str) -> Result<nix::fcntl::Flock<std::fs::File>> {
    let file = std::fs::File::create(path).with_context(|| format!("creating {path}"))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .with_context(|| format!("locking {path}"))
}

/// Run podman; its output, whatever its exit status.
fn podman(args: &[&str]) -> Result<Output> {
    Command::new("podman")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running podman {args:?}"))
}

/// Run podman, which must succeed; its standard output.
fn checked(args: &[&str]) -> Result<String> {
    crate::succeeded(format!("podman {args:?}"), &podman(args)?)
}

/// Run a podman question answered by its exit status (`image exists`, …).
fn exists(args: &[&str]) -> Result<bool> {
    let out = podman(args)?;
    match out.status.code() {
        Some(0) => Ok(true),
        Some(1) => Ok(false),
        _ => bail!(
            "podman {args:?} failed with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// A name no other test process uses at the same time.
fn unique(name: &str) -> String {
    format!("kres-{name}-{}", std::process::id())
}

/// A build context: a fresh directory the test fills, removed on drop.
pub struct Context {
    pub dir: PathBuf,
}

impl Context {
    pub fn new(name: &str) -> Result<Context> {
        let dir = PathBuf::from(format!("/var/tmp/{}-context", unique(name)));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Context { dir })
    }

    /// Write a file at `rel` in the context.
    pub fn write(&self, rel: &str, contents: &str) -> Result<()> {
        crate::write(&self.dir.join(rel), contents)
    }

    /// Put an executable at `rel`, its debugging sections left out (`strip --strip-debug`:
    /// the same code, a tenth of the size of a debug build).
    pub fn add_binary(&self, rel: &str, from: &Path) -> Result<()> {
        let to = self.dir.join(rel);
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let out = Command::new("strip")
            .arg("--strip-debug")
            .arg("-o")
            .arg(&to)
            .arg(from)
            .output()
            .context("running strip (binutils)")?;
        if !out.status.success() {
            bail!(
                "strip {} failed: {}",
                from.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A built image, removed on drop.
pub struct Image {
    pub name: String,
}

impl Image {
    /// Build `containerfile` over `context` with `BASE` set to the bed's base image: offline
    /// (`--network none`, `--pull=never`), in the docker format (which keeps `HEALTHCHECK`).
    pub fn build(
        podman: &Podman,
        name: &str,
        containerfile: &Path,
        context: &Context,
    ) -> Result<Image> {
        let image = format!("localhost/{}", unique(name));
        let file = containerfile.to_string_lossy();
        let dir = context.dir.to_string_lossy();
        let base = format!("BASE={}", podman.base);
        checked(&[
            "build",
            "--format",
            "docker",
            "--network",
            "none",
            "--pull=never",
            "--build-arg",
            &base,
            "-f",
            &file,
            "-t",
            &image,
            &dir,
        ])?;
        Ok(Image { name: image })
    }

    /// Size of the image, every layer included (`podman image inspect`'s `Size`), in bytes.
    pub fn size(&self) -> Result<u64> {
        image_size(&self.name)
    }

    /// A field of the image's configuration (`podman image inspect --format`).
    pub fn inspect(&self, format: &str) -> Result<String> {
        Ok(
            checked(&["image", "inspect", "--format", format, &self.name])?
                .trim_end()
                .to_owned(),
        )
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = podman(&["rmi", "-f", &self.name]);
    }
}

/// Size of an image by name, every layer included (`podman image inspect`'s `Size`), in bytes.
pub fn image_size(image: &str) -> Result<u64> {
    let out = checked(&["image", "inspect", "--format", "{{.Size}}", image])?;
    out.trim()
        .parse()
        .with_context(|| format!("image size {out:?}"))
}

/// A directory of the host mounted read-only inside a container.
pub struct Bind<'a> {
    pub host: &'a Path,
    pub inside: &'a str,
}

/// What removes a container when its handle goes.
#[derive(Debug, Clone, Copy)]
enum Owner {
    /// Started by [`Container::run`]: the handle removes it.
    Handle,
    /// Part of a played pod: [`Kube`] takes it down.
    Pod,
}

/// A container.
pub struct Container {
    pub name: String,
    owner: Owner,
}

/// How `podman stop` went.
#[derive(Debug, Clone, Copy)]
pub struct Stopped {
    /// From asking podman to stop to podman returning.
    pub took: Duration,
    /// The container's exit code (137 when podman had to SIGKILL it).
    pub exit_code: i32,
}

/// The result of one `podman healthcheck run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Healthy,
    /// The check failed; podman's words.
    Unhealthy(String),
}

/// A process seen from inside a container.
#[derive(Debug, Clone)]
pub struct Process {
    pub info: ProcInfo,
    /// Real user id.
    pub uid: u32,
}

impl Container {
    /// `podman run -d` `image` as `name` (made unique), loopback only, with `binds` and
    /// `command` (the image's CMD when empty).
    pub fn run(
        image: &Image,
        name: &str,
        binds: &[Bind<'_>],
        command: &[&str],
    ) -> Result<Container> {
        Self::run_with_options(image, name, binds, &[], command)
    }

    /// [`Container::run`] with more options of `podman run` (`--user`, `--cap-drop`,
    /// `--read-only`, `--tmpfs` …); never a network option: it stays loopback only.
    pub fn run_with_options(
        image: &Image,
        name: &str,
        binds: &[Bind<'_>],
        options: &[&str],
        command: &[&str],
    ) -> Result<Container> {
        if options
            .iter()
            .any(|o| o.starts_with("--network") || o.starts_with("--net="))
        {
            bail!("the container's network is `none`, not {options:?}");
        }
        let name = unique(name);
        let _ = podman(&["rm", "-f", "-t", REMOVE_GRACE, &name]);
        let mut args: Vec<String> = ["run", "-d", "--network", "none", "--name", &name]
            .map(str::to_owned)
            .to_vec();
        args.extend(options.iter().map(|o| (*o).to_owned()));
        for b in binds {
            args.push("-v".into());
            args.push(format!("{}:{}:ro", b.host.display(), b.inside));
        }
        args.push(image.name.clone());
        args.extend(command.iter().map(|s| (*s).to_owned()));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        // podman 4.3 prints errors about the missing systemd (health check timers) and still
        // starts the container: its exit status is what counts.
        checked(&argv)?;
        Ok(Container {
            name,
            owner: Owner::Handle,
        })
    }

    /// Run a command inside the container (as root) and wait for it.
    pub fn exec(&self, argv: &[&str]) -> Result<Output> {
        let mut args = vec!["exec", self.name.as_str()];
        args.extend_from_slice(argv);
        podman(&args)
    }

    /// Run a shell script inside the container.
    pub fn sh(&self, script: &str) -> Result<Output> {
        self.exec(&["sh", "-c", script])
    }

    /// Run a command that must succeed; its standard output.
    pub fn ok(&self, argv: &[&str]) -> Result<String> {
        crate::succeeded(format!("{argv:?} in {}", self.name), &self.exec(argv)?)
    }

    /// Every process of the container (zombies included), as the container sees them; the
    /// lister's own shell, `cat` and `grep` among them.
    pub fn processes(&self) -> Result<Vec<Process>> {
        let out = self.ok(&[
            "sh",
            "-c",
            "for d in /proc/[0-9]*; do s=$(cat $d/stat 2>/dev/null) && \
             u=$(grep '^Uid:' $d/status 2>/dev/null) && printf '%s|%s\\n' \"$u\" \"$s\"; done",
        ])?;
        Ok(out
            .lines()
            .filter_map(|l| {
                let (uid, stat) = l.split_once('|')?;
                let uid = uid.split_whitespace().nth(1)?.parse().ok()?;
                Some(Process {
                    info: crate::procs::parse_stat(stat)?,
                    uid,
                })
            })
            .collect())
    }

    /// Ask `name` for its A records from inside the container (kdig on 127.0.0.1:53).
    pub fn dig_a(&self, name: &str) -> Result<Vec<String>> {
        Ok(crate::short_answers(&self.exec(&crate::kdig_a(name))?))
    }

    /// A field of `podman container inspect` (a Go template such as `{{.State.Pid}}`).
    pub fn inspect(&self, format: &str) -> Result<String> {
        Ok(
            checked(&["container", "inspect", "--format", format, &self.name])?
                .trim_end()
                .to_owned(),
        )
    }

    /// Run the image's health check once (`podman healthcheck run`).
    pub fn health(&self) -> Result<Health> {
        let out = podman(&["healthcheck", "run", &self.name])?;
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .trim()
        .to_owned();
        match out.status.code() {
            Some(0) => Ok(Health::Healthy),
            Some(1) => Ok(Health::Unhealthy(said)),
            _ => bail!("podman healthcheck run failed with {}: {said}", out.status),
        }
    }

    /// What the last health check printed, as podman stored it (`State.Health.Log`).
    pub fn last_health_output(&self) -> Result<String> {
        let health: serde_json::Value =
            serde_json::from_str(&self.inspect("{{json .State.Health}}")?)
                .context("parsing State.Health")?;
        health["Log"]
            .as_array()
            .and_then(|log| log.last())
            .and_then(|run| run["Output"].as_str())
            .map(str::to_owned)
            .context("no health check has run")
    }

    /// `podman stop -t grace`, timed; then the container's exit code.
    pub fn stop(&self, grace: Duration) -> Result<Stopped> {
        let grace = grace.as_secs().to_string();
        let started = Instant::now();
        checked(&["stop", "-t", &grace, &self.name])?;
        let took = started.elapsed();
        let code = self.inspect("{{.State.ExitCode}}")?;
        let exit_code = code
            .parse()
            .with_context(|| format!("exit code {code:?}"))?;
        Ok(Stopped { took, exit_code })
    }

    /// The exit codes of the container's deaths so far, oldest first (its `died` events).
    pub fn died(&self) -> Result<Vec<i32>> {
        let id = self.inspect("{{.Id}}")?;
        let filter = format!("container={id}");
        let out = checked(&[
            "events",
            "--stream=false",
            "--filter",
            &filter,
            "--filter",
            "event=died",
            "--format",
            "{{.ContainerExitCode}}",
        ])?;
        out.lines()
            .map(|l| l.trim().parse().with_context(|| format!("exit code {l:?}")))
            .collect()
    }

    /// Send a signal to the container's PID 1 (`podman kill -s`).
    pub fn kill(&self, signal: &str) -> Result<()> {
        checked(&["kill", "-s", signal, &self.name])?;
        Ok(())
    }

    /// The container's output so far (standard output and error).
    pub fn logs(&self) -> Result<String> {
        let out = podman(&["logs", &self.name])?;
        Ok(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        match self.owner {
            Owner::Handle => {
                let _ = podman(&["rm", "-f", "-v", "-t", REMOVE_GRACE, &self.name]);
            }
            Owner::Pod => {}
        }
    }
}

/// Something `podman kube play` makes besides pods, named after the played file's names:
/// removed before playing (left over from an interrupted run) and after taking the pods down.
#[derive(Debug, Clone)]
pub enum Made {
    /// A named volume: an `emptyDir` (named after the pod's volume) or a ConfigMap's files
    /// (named after the ConfigMap).
    Volume(String),
    /// A podman secret made from a `Secret` document.
    Secret(String),
}

impl Made {
    fn remove(&self) {
        let _ = match self {
            Made::Volume(name) => podman(&["volume", "rm", "-f", name]),
            Made::Secret(name) => podman(&["secret", "rm", name]),
        };
    }
}

/// Pods played from a Kubernetes YAML file (`podman kube play --network none`: loopback
/// only), taken down on drop. One played file at a time on the machine.
pub struct Kube {
    file: PathBuf,
    made: Vec<Made>,
    /// Held while the pods exist.
    _lock: nix::fcntl::Flock<std::fs::File>,
}

impl Kube {
    /// Play `file`, which makes `made` besides its pods. A Deployment's pods are named
    /// `NAME-pod-N`, their containers `NAME-pod-N-CONTAINER`.
    pub fn play(file: &Path, made: Vec<Made>) -> Result<Kube> {
        let lock = lock(KUBE_LOCK)?;
        let path = file.to_string_lossy();
        let _ = podman(&["kube", "down", &path]);
        for m in &made {
            m.remove();
        }
        let kube = Kube {
            file: file.to_owned(),
            made,
            _lock: lock,
        };
        // podman 4.3 prints errors about the missing systemd (health check timers) and still
        // starts the pods: its exit status is what counts.
        checked(&["kube", "play", "--network", "none", &path])?;
        Ok(kube)
    }

    /// A container of a played pod, by podman's name.
    pub fn container(&self, name: &str) -> Container {
        Container {
            name: name.to_owned(),
            owner: Owner::Pod,
        }
    }

    /// Where a named volume of the pods lives on the host (a ConfigMap's files, …).
    pub fn volume_dir(&self, name: &str) -> Result<PathBuf> {
        let dir = checked(&["volume", "inspect", "--format", "{{.Mountpoint}}", name])?;
        Ok(PathBuf::from(dir.trim_end()))
    }
}

impl Drop for Kube {
    fn drop(&mut self) {
        let _ = podman(&["kube", "down", &self.file.to_string_lossy()]);
        for m in &self.made {
            m.remove();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fitted_conf;

    #[test]
    fn containers_conf_gets_the_needed_keys_and_keeps_the_others() {
        let fitted = fitted_conf("").unwrap().unwrap();
        assert!(fitted.contains("runtime = \"runc\""), "{fitted}");
        assert!(fitted.contains("nofile=20000:20000"), "{fitted}");
        assert_eq!(fitted_conf(&fitted).unwrap(), None, "fitted twice");

        let own = "[engine]\nruntime = \"crun\"\nnum_locks = 4096\n[network]\ndns_bind_port = 53\n";
        let fitted = fitted_conf(own).unwrap().unwrap();
        let table: toml::Table = fitted.parse().unwrap();
        assert_eq!(table["engine"]["runtime"].as_str(), Some("runc"));
        assert_eq!(table["engine"]["num_locks"].as_integer(), Some(4096));
        assert_eq!(table["network"]["dns_bind_port"].as_integer(), Some(53));

        assert!(fitted_conf("engine = 1\n").is_err());
    }
}
