//! The manager keeper of the root process: run the manager process, serve its link, and
//! start the next incarnation after every failure (backing off, the streak forgiven after a
//! stable run), until it asks the root to stop, cannot be kept, or the root stops.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::time::{Duration, SystemTime};

use supervisor::remote::{
    self, ChildEnd, ChildPolicy, ChildService, EnvironmentPolicy, FdStore, Link,
};
use supervisor::upward::UpwardNotifier;
use supervisor::{
    Backoff, Output, Readiness, RestartPolicy, ServiceSpec, StopPolicy, SupervisorError,
    SupervisorHandle,
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::super::{recovery, LINK_FD, STORED_CONFIG};
use super::start::keeps_upward;
use super::{keep_in, Root, Stop};
use crate::manager::Executables;
use crate::service::{self, ServiceKind};
use kres_wire::failures::ProcessFailureRecord;

/// A manager process that ran this long before it failed has its failure streak forgiven.
const MANAGER_STABLE_AFTER: Duration = Duration::from_secs(60);

/// A manager that answers no ping for this long is hung and replaced (override:
/// `KRES_MANAGER_HANG_TIMEOUT` in seconds, for tests).
const MANAGER_HANG_AFTER: Duration = Duration::from_secs(20);

/// How long the manager may take to stop (finishing API requests in flight) before SIGKILL.
const MANAGER_STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// What keeps the manager process running: the supervisor, the fd store, systemd above us,
/// the incarnation count, and where its upgrade requests go.
pub(super) struct Keeper<'a> {
    pub(super) sup: &'a SupervisorHandle,
    pub(super) store: &'a mut FdStore,
    pub(super) upward: &'a UpwardNotifier,
    pub(super) incarnations: &'a mut u32,
    pub(super) reexec: &'a tokio::sync::mpsc::UnboundedSender<supervisor::remote::ReexecRequest>,
}

impl Root {
    /// The manager process's spec: its command line, our environment, our working directory.
    fn manager_spec(&self) -> ServiceSpec {
        let argv = self.manager_argv.clone();
        let mut spec = ServiceSpec::new(service::MANAGER, ServiceKind::Manager.as_str(), argv);
        spec.env = crate::manager::specs::child_base_env(&self.env);
        spec.cwd = self.manager_cwd.clone();
        spec.readiness = Readiness::None;
        spec.restart = RestartPolicy::Never;
        spec.output = Output::Inherited;
        spec.stop = StopPolicy {
            signal: nix::sys::signal::Signal::SIGTERM,
            timeout: MANAGER_STOP_TIMEOUT,
        };
        // The manager parses everything that comes from outside: when we are root and the
        // workers have a user of their own, it runs as that user, with no_new_privs and no
        // capability but binding the workers' ports (it binds their listening sockets).
        if let Some(workers) = self.run_as.filter(|_| nix::unistd::geteuid().is_root()) {
            spec.user = Some(workers);
            spec.keep = supervisor::KeptCapabilities::BindServicePorts;
        }
        spec
    }

    /// What the manager may have the root run: exactly what the manager's specs hold
    /// (`manager::specs`): our programs, as the workers' user, in the rundir, with our
    /// environment and an instance number, with the very command lines the specs build.
    fn child_policy(&self) -> ChildPolicy {
        self.child_policy_for(Executables::discover(&self.env))
    }

    /// [`Root::child_policy`] for the programs `executables` names.
    fn child_policy_for(&self, executables: Executables) -> ChildPolicy {
        ChildPolicy {
            programs: vec![executables.kresd.clone(), executables.cache_gc.clone()],
            user: self.run_as,
            cwd: Some(self.rundir.clone()),
            env: Some(EnvironmentPolicy {
                inherited: executables.base_env.clone(),
                added: crate::manager::specs::ADDED_VARIABLES
                    .iter()
                    .map(OsString::from)
                    .collect(),
            }),
            command_lines: Some(crate::manager::specs::command_lines(
                &executables,
                &self.rundir,
            )),
            max_extension: remote::MAX_EXTENSION,
        }
    }

    /// Run the manager process, again and again when it fails, until it asks us to stop, it
    /// cannot be kept running, or `stop` fires.
    pub(super) async fn keep_manager(&self, keeper: Keeper<'_>, stop: CancellationToken) -> Stop {
        let Keeper {
            sup,
            store,
            upward,
            incarnations,
            reexec,
        } = keeper;
        let policy = self.child_policy();
        let hang_after = self.env.manager_hang_after.unwrap_or(MANAGER_HANG_AFTER);
        let service = ChildService {
            sup,
            policy: &policy,
            upward,
            hang_after,
            reexec: Some(reexec),
            keep_upward: keeps_upward,
        };
        let mut streak = FailureStreak::new(SystemTime::now());
        let first = *incarnations + 1;
        loop {
            *incarnations += 1;
            let incarnation = *incarnations;
            let started = Instant::now();
            let end = match self
                .run_incarnation(&service, store, incarnation, &stop)
                .await
            {
                Ok(end) => end,
                Err(why) => return why,
            };
            let ended = match answer(end, sup, hang_after) {
                Answer::Stop(why) => return why,
                Answer::Replace(why) => removed(sup, why).await,
            };
            if incarnation == first && store_lacks_config(store) {
                // It never finished the first start: there is nothing running to keep.
                tracing::error!("the manager failed during start-up; stopping");
                return Stop::ManagerFailed;
            }
            // Never given up on while the workers serve: a request that crashes the manager
            // again and again costs the API, not DNS.
            let delay = streak.failed(started.elapsed(), SystemTime::now());
            streak.report(delay, ended, upward, store);
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = stop.cancelled() => return Stop::Signal,
            }
        }
    }

    /// Start one incarnation of the manager process and serve its link until it ends; `Err`
    /// when not even its link can be made.
    async fn run_incarnation(
        &self,
        service: &ChildService<'_>,
        store: &mut FdStore,
        incarnation: u32,
        stop: &CancellationToken,
    ) -> Result<ChildEnd, Stop> {
        let (link, theirs) = Link::pair().map_err(|e| {
            tracing::error!("cannot create the manager's link: {e}");
            Stop::ManagerFailed
        })?;
        Ok(match self.start_manager(service.sup, theirs).await {
            Ok(pid) => {
                tracing::debug!(pid, incarnation, "manager process started");
                // The link's other end stays open in the supervisor until the service is
                // removed, so an exit shows in the process table, not as end of file.
                tokio::select! {
                    end = remote::serve_child(link, incarnation, service, store, stop.clone()) => end,
                    () = exited(service.sup, pid) => ChildEnd::Gone,
                }
            }
            Err(e) => ChildEnd::Misbehaved(remote::Misbehaviour::NotStarted(e)),
        })
    }

    async fn start_manager(
        &self,
        sup: &SupervisorHandle,
        link: OwnedFd,
    ) -> Result<i32, SupervisorError> {
        sup.add_handing(self.manager_spec(), vec![(link, LINK_FD)])
            .await?;
        sup.start(service::MANAGER).await.map(|p| p.as_raw())
    }
}

/// How the root answers the end of a manager incarnation.
enum Answer {
    /// The keeper ends: the root stops, for this reason.
    Stop(Stop),
    /// The incarnation failed: replace it; why, when known before its exit status.
    Replace(Option<String>),
}

/// The answer to `end`: a manager that hung or misbehaved is killed (not trusted to stop
/// gracefully, it would take connections waiting in the API's backlog with it instead of
/// leaving them to its successor).
fn answer(end: ChildEnd, sup: &SupervisorHandle, hang_after: Duration) -> Answer {
    match end {
        ChildEnd::Exit(code) => Answer::Stop(Stop::Requested(code)),
        ChildEnd::Stopped => Answer::Stop(Stop::Signal),
        ChildEnd::Hung => {
            tracing::error!(
                "the manager process answered nothing for {} s; replacing it",
                hang_after.as_secs()
            );
            signal_manager(sup, nix::sys::signal::Signal::SIGKILL);
            Answer::Replace(Some(format!(
                "answered nothing for {} s",
                hang_after.as_secs()
            )))
        }
        ChildEnd::Misbehaved(why) => {
            tracing::error!("the manager process failed: {why}");
            signal_manager(sup, nix::sys::signal::Signal::SIGKILL);
            Answer::Replace(Some(why.to_string()))
        }
        // Not its fault: it is stopped as gracefully as at any replacement.
        ChildEnd::LinkFailed(why) => {
            tracing::error!("the link to the manager process failed: {why}; replacing it");
            Answer::Replace(Some(format!("its link failed: {why}")))
        }
        ChildEnd::Gone => Answer::Replace(None),
    }
}

/// How a manager process that failed ended.
struct Ended {
    /// Why it failed: what the root saw (a hang, a broken link), else its exit status, else
    /// nothing known.
    why: Option<String>,
    /// Its exit status, when it was reaped (a death by signal stays one).
    status: Option<supervisor::ExitStatus>,
}

/// Remove the manager service (logging how it ended) and say how it ended.
async fn removed(sup: &SupervisorHandle, why: Option<String>) -> Ended {
    let last_exit = sup
        .snapshot()
        .processes
        .iter()
        .find(|p| p.name == service::MANAGER)
        .and_then(|p| p.last_exit);
    match sup.remove(service::MANAGER).await {
        Ok(status) => match status.or(last_exit) {
            Some(status) => {
                tracing::error!("the manager process ended: {status}");
                return Ended {
                    why: why.or_else(|| Some(status.to_string())),
                    status: Some(status),
                };
            }
            None => tracing::error!("the manager process ended"),
        },
        Err(e) => tracing::error!("the manager process: {e}"),
    }
    Ended {
        why,
        status: last_exit,
    }
}

/// The manager process's unforgiven failures: how many, since when, and the delay before
/// the next start, which grows to the backoff's cap.
struct FailureStreak {
    backoff: Backoff,
    /// Failures in the streak.
    failures: u32,
    /// Failures since the root started, forgiven or not: the manager's restarts.
    total: u32,
    /// When the first of them happened.
    since: SystemTime,
}

impl FailureStreak {
    fn new(now: SystemTime) -> FailureStreak {
        FailureStreak {
            backoff: Backoff::default(),
            failures: 0,
            total: 0,
            since: now,
        }
    }

    /// One more failure, at `now`, of an incarnation that ran for `ran`: the delay before the
    /// next start. A failure after a stable run begins a new streak.
    fn failed(&mut self, ran: Duration, now: SystemTime) -> Duration {
        if ran >= MANAGER_STABLE_AFTER || self.failures == 0 {
            self.failures = 0;
            self.since = now;
        }
        self.failures = self.failures.saturating_add(1);
        self.total = self.total.saturating_add(1);
        self.backoff.delay(self.failures, 0)
    }

    /// Tell of the streak: the log, systemd's status, and the record in `store` that the
    /// next incarnation serves on `/processes`.
    fn report(&self, delay: Duration, ended: Ended, upward: &UpwardNotifier, store: &mut FdStore) {
        let failures = self.failures;
        let within = self.since.elapsed().unwrap_or_default().as_secs();
        tracing::warn!(
            "the manager process failed {failures} times within {within} s; restarting it in {} ms; the workers keep running",
            delay.as_millis()
        );
        upward.status(&format!(
            "Manager restarting after {failures} failures within {within} s; workers serving"
        ));
        let record = ProcessFailureRecord {
            failures,
            since: self
                .since
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            last: ended.why.unwrap_or_else(|| "ended".to_owned()),
            restarts: self.total,
            last_exit: ended.status,
        };
        let made = recovery::failure_record(&record);
        if let Err(e) = keep_in(store, recovery::STORED_FAILURES, made) {
            tracing::warn!("cannot record the manager's failures: {e}");
        }
    }
}

/// Wait until process `pid` of the manager service has exited.
async fn exited(sup: &SupervisorHandle, pid: i32) {
    let mut snapshots = sup.subscribe();
    let _ = snapshots
        .wait_for(|s| {
            !s.processes
                .iter()
                .any(|p| p.name == service::MANAGER && p.pid == Some(pid))
        })
        .await;
}

/// Whether the manager never stored the configuration it runs, i.e. never finished a start.
fn store_lacks_config(store: &FdStore) -> bool {
    !store.contains(STORED_CONFIG)
}

/// Send `signal` to the manager process, if it runs.
fn signal_manager(sup: &SupervisorHandle, signal: nix::sys::signal::Signal) {
    let snapshot = sup.snapshot();
    let pid = snapshot
        .processes
        .iter()
        .find(|p| p.name == service::MANAGER)
        .and_then(|p| p.pid);
    if let Some(pid) = pid {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use serde_json::json;
    use supervisor::upward::Upward;

    use super::*;
    use crate::manager::listen::{wanted, SocketTable};
    use crate::manager::specs::Specs;
    use crate::service::WorkerId;
    use kres_config::{validate, KresConfig, PathChecks, ValidationContext};

    const RUNDIR: &str = "/run/knot-resolver";

    /// `raw` validated as the manager validates a change (paths as written, not checked).
    fn typed(raw: serde_json::Value) -> KresConfig {
        let ctx = ValidationContext {
            resolve_root: PathBuf::from("/etc/knot-resolver"),
            checks: PathChecks::Lenient,
            logtarget_arg: Default::default(),
        };
        validate(&raw, &ctx).unwrap_or_else(|e| panic!("{raw}: {e}"))
    }

    /// Every spec the manager builds for `cfg`: each worker with the sockets its
    /// configuration binds (on loopback, port 0 made a free port), the canary, the
    /// policy-loader and the cache collector.
    fn manager_specs(specs: &Specs, cfg: &KresConfig) -> Vec<ServiceSpec> {
        let keys = wanted(&cfg.network).expect("listen keys");
        let mut table = SocketTable::default();
        let workers = cfg.workers;
        let prepared = table.prepare(&keys, workers).expect("sockets bind");
        table.commit(prepared, &keys, workers);
        let mut built: Vec<ServiceSpec> = (0..workers)
            .map(|slot| specs.worker(cfg, WorkerId(slot), table.slot(slot).1))
            .collect();
        built.push(specs.canary(cfg, WorkerId(workers)));
        built.push(specs.policy_loader(cfg));
        built.push(specs.cache_gc(cfg));
        built
    }

    #[test]
    fn the_child_policy_admits_exactly_the_command_lines_the_manager_builds() {
        let root = super::super::tests::root(Path::new(RUNDIR), &["/bin/true"]);
        let executables = Executables {
            kresd: PathBuf::from("/usr/sbin/kresd"),
            cache_gc: PathBuf::from("/usr/sbin/kres-cache-gc"),
            run_as: None,
            base_env: vec![("PATH".into(), "/usr/bin".into())],
        };
        let policy = root.child_policy_for(executables.clone());
        let specs = Specs::new(executables);
        let port = |_| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .expect("a free port")
        };
        let [dns, dot] = [0, 1].map(port);
        let plain = typed(json!({"rundir": RUNDIR, "workers": 2,
            "network": {"listen": [{"interface": format!("127.0.0.1@{dns}")},
                                   {"interface": format!("127.0.0.1@{dot}"), "kind": "dot"}]}}));
        let verbose_dry_gc = typed(json!({"rundir": RUNDIR, "workers": 1,
            "network": {"listen": [{"interface": format!("127.0.0.1@{dns}")}]},
            "logging": {"level": "debug"},
            "cache": {"storage": "relative-cache", "garbage-collector": {"dry-run": true}}}));
        let mut legitimate = manager_specs(&specs, &plain);
        legitimate.extend(manager_specs(&specs, &verbose_dry_gc));
        for spec in &legitimate {
            policy
                .check(spec)
                .unwrap_or_else(|e| panic!("{:?} refused: {e}", spec.argv));
        }
        let argvs: Vec<&[OsString]> = legitimate.iter().map(|s| s.argv.as_slice()).collect();
        assert!(
            argvs
                .iter()
                .any(|a| a.iter().any(|w| w.to_string_lossy().ends_with(":tls"))),
            "a worker with a DoT socket among them: {argvs:?}"
        );
        assert!(
            argvs
                .iter()
                .any(|a| a.ends_with(&["-v".into(), "-n".into()])),
            "a verbose dry-run collector among them: {argvs:?}"
        );
        // Each row edits the command line of one spec the manager built.
        let worker = || legitimate[0].clone();
        let policy_loader = || {
            let found = legitimate
                .iter()
                .find(|s| s.name == crate::service::POLICY_LOADER);
            found.expect("a policy-loader").clone()
        };
        let cache_gc = || {
            let found = legitimate
                .iter()
                .find(|s| s.name == crate::service::CACHE_GC);
            found.expect("a collector").clone()
        };
        type Edit = fn(&mut Vec<OsString>);
        let rows: Vec<(&str, ServiceSpec, Edit)> = vec![
            ("-cX", worker(), |a| {
                a.splice(1..3, ["-c/tmp/evil.lua".into()]);
            }),
            ("-cX after the configuration", worker(), |a| {
                a.insert(3, "-c/tmp/evil.lua".into());
            }),
            ("--config=X", worker(), |a| {
                a.splice(1..3, ["--config=/tmp/evil.lua".into()]);
            }),
            ("--config=X added", policy_loader(), |a| {
                a.push("--config=/tmp/evil.lua".into());
            }),
            ("a positional rundir", worker(), |a| a.push("/tmp".into())),
            (
                "a positional rundir to the policy-loader",
                policy_loader(),
                |a| {
                    a.push("/tmp".into());
                },
            ),
            ("a configuration outside the rundir", worker(), |a| {
                a[2] = "/tmp/evil.lua".into();
            }),
            ("a configuration below the rundir", worker(), |a| {
                a[2] = format!("{RUNDIR}/sub/evil.lua").into();
            }),
            ("a configuration climbing out", policy_loader(), |a| {
                a[2] = format!("{RUNDIR}/../evil.lua").into();
            }),
            ("a relative configuration", worker(), |a| {
                a[2] = "evil.lua".into()
            }),
            ("standard input as the only configuration", worker(), |a| {
                a[2] = "-".into();
            }),
            ("an extra flag", worker(), |a| a.insert(3, "-v".into())),
            ("a socket argument cut short", worker(), |a| {
                a.push("-S".into())
            }),
            ("a socket of another kind", worker(), |a| {
                a.extend(["-S".into(), "7:udp".into()]);
            }),
            ("no -n", worker(), |a| a.truncate(3)),
            ("a second configuration file", policy_loader(), |a| {
                a[4] = format!("{RUNDIR}/kresd0.conf").into();
            }),
            ("a collector's flag twice", cache_gc(), |a| {
                a.extend(["-d".into(), "1".into()]);
            }),
            ("a collector's value not a number", cache_gc(), |a| {
                a[4] = "1;rm".into();
            }),
            ("a collector's cache climbing out", cache_gc(), |a| {
                a[2] = "/var/cache/../../etc".into();
            }),
            ("the collector's options reordered", cache_gc(), |a| {
                a.swap(3, 5)
            }),
            (
                "the collector running kresd's command line",
                worker(),
                |a| {
                    a[0] = "/usr/sbin/kres-cache-gc".into();
                },
            ),
        ];
        for (what, mut spec, edit) in rows {
            edit(&mut spec.argv);
            assert!(
                matches!(policy.check(&spec), Err(SupervisorError::Refused(_))),
                "{what} was allowed: {:?}",
                spec.argv
            );
        }
    }

    #[test]
    fn the_root_cuts_the_managers_extensions_of_the_service_managers_timeout() {
        let root = super::super::tests::root(Path::new(RUNDIR), &["/bin/true"]);
        let policy = root.child_policy();
        let rows = [
            // What the manager asks while a policy-loader runs: passed on as it is.
            (Duration::from_secs(30), Duration::from_secs(30)),
            (Duration::from_secs(300), Duration::from_secs(300)),
            (Duration::from_secs(301), Duration::from_secs(300)),
            // EXTEND_TIMEOUT_USEC's largest value, and more than it carries.
            (
                Duration::from_micros(u64::from(u32::MAX)),
                Duration::from_secs(300),
            ),
            (Duration::MAX, Duration::from_secs(300)),
        ];
        for (asked, passed) in rows {
            assert_eq!(
                policy.passed_upward(&Upward::ExtendTimeout(asked)),
                Upward::ExtendTimeout(passed),
                "{asked:?}"
            );
        }
    }

    #[test]
    fn failures_grow_the_delay_until_a_stable_run_forgives_them() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let mut streak = FailureStreak::new(t0);
        let quick = Duration::from_secs(1);
        // The first failure restarts at once; later ones back off, never less than before.
        assert_eq!(streak.failed(quick, t0), Duration::ZERO);
        let mut before = Duration::ZERO;
        for n in 2..=5 {
            let delay = streak.failed(quick, t0 + Duration::from_secs(n));
            assert!(
                delay > Duration::ZERO && delay >= before,
                "failure {n}: {delay:?}"
            );
            before = delay;
        }
        assert_eq!((streak.failures, streak.since), (5, t0));
        // After a stable run, a failure begins a new streak.
        let later = t0 + Duration::from_secs(600);
        assert_eq!(streak.failed(MANAGER_STABLE_AFTER, later), Duration::ZERO);
        assert_eq!((streak.failures, streak.since), (1, later));
        // The restarts are every failure, forgiven or not.
        assert_eq!(streak.total, 6);
    }
}
