//! What a directing child may ask of the supervisor: the programs it may run, as whom,
//! with which environment; and the names it may use.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use super::{MAX_NAME, MAX_STATUS};
use crate::call::SupervisorError;
use crate::command_line::CommandLine;
use crate::spec::{Credentials, KeptCapabilities, ServiceSpec};
use crate::upward::Upward;

/// Rules for what a directing child may ask.
#[derive(Debug, Clone)]
pub struct ChildPolicy {
    /// Programs services may run (`argv[0]`); empty allows any.
    pub programs: Vec<PathBuf>,
    /// The user every service must run as: `None`, as we do (no switch of user).
    pub user: Option<Credentials>,
    /// The working directory services may have (or none); `None` allows any.
    pub cwd: Option<PathBuf>,
    /// What services' environments may hold; `None` allows anything.
    pub env: Option<EnvironmentPolicy>,
    /// The command lines services may have, each exactly of one of these shapes; `None`
    /// allows any arguments.
    pub command_lines: Option<Vec<CommandLine>>,
    /// The longest extension of the service manager's timeout (`EXTEND_TIMEOUT_USEC`)
    /// passed upward at once: a longer one is cut to it, so that a child cannot hold a
    /// start, reload or stop for an hour.
    pub max_extension: Duration,
}

/// The longest extension of the service manager's timeout a child's notification passes on
/// unless its policy says otherwise: five minutes, several times any one step a child asks
/// for, and an extension can be asked again as the step goes on.
pub const MAX_EXTENSION: Duration = Duration::from_secs(300);

/// The environment a service may have: what we pass on, unchanged, and a few more names.
#[derive(Debug, Clone, Default)]
pub struct EnvironmentPolicy {
    /// Variables passed on to every child, each with the value it must have.
    pub inherited: Vec<(OsString, OsString)>,
    /// Names of variables a spec may add with any value of at most 64 printable bytes.
    pub added: Vec<OsString>,
}

impl ChildPolicy {
    /// Services may run `programs` with any user, directory, environment and arguments our
    /// own user may (tests, fixtures).
    pub fn programs(programs: Vec<PathBuf>) -> ChildPolicy {
        ChildPolicy {
            programs,
            user: None,
            cwd: None,
            env: None,
            command_lines: None,
            max_extension: MAX_EXTENSION,
        }
    }

    /// Whether a manager may have `spec` run: its whole spec, not only its program, since a
    /// manager taken over by hostile input must not make the root run anything else, as
    /// anyone else, with other arguments, or with a preloaded library.
    pub fn check(&self, spec: &ServiceSpec) -> Result<(), SupervisorError> {
        // Both are in every process table from now on: bounded, so that tables fit the link.
        check_name(&spec.name)?;
        if spec.kind.len() > MAX_NAME {
            return Err(SupervisorError::Refused(format!(
                "a kind of {} bytes",
                spec.kind.len()
            )));
        }
        let refuse = |why: String| Err(SupervisorError::Refused(format!("{}: {why}", spec.name)));
        let program = spec.argv.first();
        let allowed = self.programs.is_empty()
            || program.is_some_and(|p| self.programs.iter().any(|a| a.as_os_str() == p));
        if !allowed {
            return refuse(format!("may not run {program:?}"));
        }
        if spec.user != self.user {
            return refuse(format!("may not run as {:?}", spec.user));
        }
        if spec.keep != KeptCapabilities::None {
            return refuse(format!("may not keep capabilities ({:?})", spec.keep));
        }
        if let (Some(cwd), Some(allowed)) = (&spec.cwd, &self.cwd) {
            if cwd != allowed {
                return refuse(format!("may not run in {}", cwd.display()));
            }
        }
        if let Some(env) = &self.env {
            for (key, value) in &spec.env {
                if !env.allows(key, value) {
                    return refuse(format!("may not set {key:?}"));
                }
            }
        }
        if let Some(shapes) = &self.command_lines {
            if !shapes.iter().any(|shape| shape.matches(&spec.argv)) {
                return refuse(format!(
                    "may not run the command line {}",
                    shown_command_line(&spec.argv)
                ));
            }
        }
        Ok(())
    }

    /// What of a child's notification goes upward: its status text one printable line of
    /// at most [`MAX_STATUS`] bytes, an extension of the timeout at most `max_extension`.
    pub fn passed_upward(&self, note: &Upward) -> Upward {
        match note.bounded(MAX_STATUS) {
            Upward::ExtendTimeout(by) => Upward::ExtendTimeout(by.min(self.max_extension)),
            bounded => bounded,
        }
    }
}

/// A refused command line for its error: quoted, at most [`MAX_SHOWN_ARGUMENTS`] arguments
/// of it, each one cut to a bounded printable line.
fn shown_command_line(argv: &[OsString]) -> String {
    let mut shown: Vec<String> = argv
        .iter()
        .take(MAX_SHOWN_ARGUMENTS)
        .map(|a| {
            format!(
                "{:?}",
                crate::text::one_line(&a.to_string_lossy(), MAX_NAME)
            )
        })
        .collect();
    if argv.len() > MAX_SHOWN_ARGUMENTS {
        shown.push(format!("and {} more", argv.len() - MAX_SHOWN_ARGUMENTS));
    }
    shown.join(" ")
}

/// The most arguments of a refused command line its error shows.
const MAX_SHOWN_ARGUMENTS: usize = 16;

impl EnvironmentPolicy {
    fn allows(&self, key: &OsString, value: &OsString) -> bool {
        self.inherited.iter().any(|(k, v)| k == key && v == value)
            || (self.added.contains(key)
                && value.len() <= 64
                && value
                    .as_encoded_bytes()
                    .iter()
                    .all(|b| b.is_ascii_graphic()))
    }
}

/// Refuse a service name longer than [`MAX_NAME`]: it would travel in every table and reply.
pub(super) fn check_name(name: &str) -> Result<(), SupervisorError> {
    if name.len() > MAX_NAME {
        return Err(SupervisorError::Refused(format!(
            "a service name of {} bytes",
            name.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command_line::Arg;

    #[test]
    fn the_child_policy_checks_the_whole_spec() {
        let workers = Credentials { uid: 995, gid: 995 };
        let policy = ChildPolicy {
            programs: vec![PathBuf::from("/usr/sbin/kresd")],
            user: Some(workers),
            cwd: Some(PathBuf::from("/run/knot-resolver")),
            env: Some(EnvironmentPolicy {
                inherited: vec![("PATH".into(), "/usr/bin".into())],
                added: vec!["SYSTEMD_INSTANCE".into()],
            }),
            command_lines: Some(vec![CommandLine::program("/usr/sbin/kresd")
                .flag("-c")
                .then(Arg::FileIn(PathBuf::from("/run/knot-resolver")))
                .flag("-c")
                .flag("-")
                .flag("-n")]),
            max_extension: MAX_EXTENSION,
        };
        let worker = || {
            let mut spec = ServiceSpec::new(
                "kresd0",
                "kresd",
                vec![
                    "/usr/sbin/kresd".into(),
                    "-c".into(),
                    "/run/knot-resolver/kresd0.conf".into(),
                    "-c".into(),
                    "-".into(),
                    "-n".into(),
                ],
            );
            spec.user = Some(workers);
            spec.cwd = Some(PathBuf::from("/run/knot-resolver"));
            spec.env = vec![
                ("PATH".into(), "/usr/bin".into()),
                ("SYSTEMD_INSTANCE".into(), "0".into()),
            ];
            spec
        };
        policy.check(&worker()).expect("what the manager asks for");
        type Edit = fn(&mut ServiceSpec);
        let refused: &[(&str, Edit)] = &[
            ("another program", |s| s.argv[0] = "/bin/sh".into()),
            ("root", |s| s.user = Some(Credentials { uid: 0, gid: 0 })),
            ("our own user", |s| s.user = None),
            ("capabilities", |s| {
                s.keep = KeptCapabilities::BindServicePorts;
            }),
            ("another directory", |s| s.cwd = Some(PathBuf::from("/"))),
            ("a preloaded library", |s| {
                s.env.push(("LD_PRELOAD".into(), "/tmp/evil.so".into()));
            }),
            ("an inherited variable changed", |s| {
                s.env[0].1 = "/tmp/evil".into();
            }),
            ("an added variable of control bytes", |s| {
                s.env[1].1 = "0\n1".into();
            }),
            ("a configuration outside the rundir", |s| {
                s.argv[2] = "/tmp/evil.lua".into();
            }),
            ("a configuration climbing out", |s| {
                s.argv[2] = "/run/knot-resolver/../../tmp/evil.lua".into();
            }),
            ("a relative configuration", |s| {
                s.argv[4] = "evil.lua".into()
            }),
            ("a relative configuration climbing out", |s| {
                s.argv[4] = "../evil.lua".into();
            }),
            ("the configuration joined to its flag (-cX)", |s| {
                s.argv.splice(1..3, ["-c/tmp/evil.lua".into()]);
            }),
            ("the configuration as --config=X", |s| {
                s.argv.splice(1..3, ["--config=/tmp/evil.lua".into()]);
            }),
            ("a positional rundir", |s| s.argv.push("/tmp".into())),
            ("an extra flag", |s| s.argv.insert(5, "-v".into())),
            ("no arguments", |s| s.argv.truncate(1)),
        ];
        for (what, edit) in refused {
            let mut spec = worker();
            edit(&mut spec);
            assert!(
                matches!(policy.check(&spec), Err(SupervisorError::Refused(_))),
                "{what} was allowed"
            );
        }
        // Without a working directory it runs in ours: allowed, as the cache collector does.
        let mut spec = worker();
        spec.cwd = None;
        policy.check(&spec).expect("no directory");
        // An extension of the timeout passes upward up to the policy's bound, and no further.
        let rows = [
            (Duration::from_secs(30), Duration::from_secs(30)),
            (MAX_EXTENSION, MAX_EXTENSION),
            (Duration::from_secs(3600), MAX_EXTENSION),
            (Duration::MAX, MAX_EXTENSION),
        ];
        for (asked, passed) in rows {
            assert_eq!(
                policy.passed_upward(&Upward::ExtendTimeout(asked)),
                Upward::ExtendTimeout(passed),
                "{asked:?}"
            );
        }
        // The permissive policy of tests checks the program and the user only.
        let loose = ChildPolicy::programs(vec![PathBuf::from("/usr/sbin/kresd")]);
        let mut spec = worker();
        spec.user = None;
        spec.env.push(("ANYTHING".into(), "goes".into()));
        loose.check(&spec).expect("loose");
    }
}
