//! kresctl's command line: the clap definition of upstream's commands, flags and help texts,
//! and nothing else. It is an interface users, scripts, the manual page and the completions
//! depend on: a change here is a change for all of them. Flags that choose between two ways
//! of doing something are parsed straight into the enum that says which (`--json` into an
//! [`OutputFormat`], `--ready` into a [`Probe`]), so no command receives a `bool`.

use std::path::PathBuf;

use clap::{ArgAction, Args, Parser, Subcommand};

use super::flags::{flag, seconds_up_to};
use super::output::OutputFormat;
use super::request::{MetricsFormat, Probe, ReloadScope, Run};
use kres_config::PathChecks;

/// Exit codes and environment, shown by `kresctl --help` (and by kresctl(8) as its EXIT
/// STATUS and ENVIRONMENT sections, split at [`ENVIRONMENT_HEADING`]).
const AFTER_LONG_HELP: &str = "Exit codes:
  0  success
  1  operational or validation error (the resolver is unreachable, the API refused the
     request, a file is invalid or cannot be read or written)
  2  usage error (unknown command or option, missing or invalid argument)

Environment:
  KRES_API_TOKEN_FILE            a file holding the API's admin bearer token, sent over TCP
                                 (the daemon reads the same variable)
  KRES_API_READ_ONLY_TOKEN_FILE  a file holding the read-only token, sent when
                                 KRES_API_TOKEN_FILE is not set
  KRES_KRESD_EXECUTABLE          the kresd whose version kresctl reports (default /usr/sbin/kresd)
  KRES_LOGTARGET                 what logging.target: from-arg means to validate and convert";

/// The line that starts the environment part of [`AFTER_LONG_HELP`].
pub const ENVIRONMENT_HEADING: &str = "Environment:";

/// Where a document comes from: built into kresctl, or asked of the running resolver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Local,
    Live,
}

/// Whether configuration files are applied or only compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyMode {
    /// Make them the running configuration.
    Apply,
    /// Only show what would change (`--dry-run`).
    DryRun,
}

/// Whether `processes` prints the table once or follows the events (`--watch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    Once,
    Watch,
}

/// What `metrics` prints: the resolver's own output, or a summary of two scrapes
/// (`--summary`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsView {
    Raw,
    Summary,
}

/// Whether `-V` asked for the versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShowVersion {
    Yes,
    No,
}

#[derive(Parser)]
#[command(
    name = "kresctl",
    version = kres_wire::version::VERSION,
    disable_version_flag = true,
    about = "Command-line utility that helps communicate with Knot Resolver's management API.",
    after_long_help = AFTER_LONG_HELP
)]
pub struct Cli {
    /// Path or URL of the management API socket.
    #[arg(
        short = 's',
        long = "socket",
        conflicts_with = "config",
        global = false
    )]
    pub socket: Option<String>,
    /// Configuration file whose `management` section names the API socket.
    #[arg(short = 'c', long = "config")]
    pub config: Option<PathBuf>,
    /// Print the versions of kresctl and of the kresd installed here (`kresd --version`).
    #[arg(id = "version", short = 'V', long = "version", action = ArgAction::SetTrue,
          value_parser = flag(ShowVersion::Yes, ShowVersion::No))]
    pub version: ShowVersion,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand)]
pub enum Command {
    /// Converts JSON or YAML configuration to Lua script.
    Convert(ConvertArgs),
    /// Migrates JSON or YAML configuration to the newer version.
    Migrate(MigrateArgs),
    /// Print a shell completion script for kresctl; with --args, the words to offer after
    /// those typed (upstream's protocol, which the bash script uses).
    Completion {
        /// The shell: bash, zsh or fish.
        #[arg(value_enum, default_value = "bash")]
        shell: CompletionShell,
        /// The shell is bash (upstream's spelling).
        #[arg(id = "bash", long = "bash", conflicts_with = "fish", action = ArgAction::SetTrue,
              value_parser = flag(ShellFlag(Some(CompletionShell::Bash)), ShellFlag(None)))]
        bash: ShellFlag,
        /// The shell is fish (upstream's spelling).
        #[arg(id = "fish", long = "fish", action = ArgAction::SetTrue,
              value_parser = flag(ShellFlag(Some(CompletionShell::Fish)), ShellFlag(None)))]
        fish: ShellFlag,
        /// The words typed after `kresctl`, the one being completed last: print the words to
        /// offer instead of a script.
        #[arg(long = "args", num_args = 0.., allow_hyphen_values = true, value_name = "WORD")]
        args: Option<Vec<String>>,
    },
    #[command(flatten)]
    Api(ApiCommand),
}

/// Commands that talk to the management API.
// (`validate`, and `schema` and `openapi` from kresctl's own copy, need no resolver.)
#[derive(Subcommand)]
pub enum ApiCommand {
    /// Read or change the running configuration.
    #[command(arg_required_else_help = true)]
    Config(ConfigArgs),
    /// List the PIDs of the resolver's processes.
    Pids {
        /// kresd, gc or all.
        #[arg(default_value = "all")]
        proc_type: String,
        /// Print the full process objects as JSON.
        #[arg(id = "json", long = "json", action = ArgAction::SetTrue,
              value_parser = flag(OutputFormat::Json, OutputFormat::Text))]
        format: OutputFormat,
    },
    /// Make configuration files the running configuration (as `PUT /v1/config`), refused if
    /// it changed since kresctl read it.
    Apply {
        /// Only show what would change, as `kresctl config diff` does; nothing changes.
        #[arg(id = "dry_run", long = "dry-run", action = ArgAction::SetTrue,
              value_parser = flag(ApplyMode::DryRun, ApplyMode::Apply))]
        mode: ApplyMode,
        /// With --dry-run: print JSON.
        #[arg(id = "json", long = "json", requires = "dry_run", action = ArgAction::SetTrue,
              value_parser = flag(OutputFormat::Json, OutputFormat::Text))]
        format: OutputFormat,
        /// The files, deep-merged in order.
        #[arg(required = true)]
        input_file: Vec<PathBuf>,
    },
    /// Stop the resolver (all its processes).
    Stop,
    /// Stop gracefully: readiness (`/readyz`) turns off at once, DNS keeps being answered
    /// for the daemon's `--drain-period`, then everything stops (as on SIGTERM).
    Drain,
    /// Upgrade the daemon in place: it re-executes its binary (a newer version installed at
    /// the same path), keeping its pid, every worker and every socket, so DNS is answered
    /// throughout. Waits until the upgrade has ended and prints the versions; exit 1 when it
    /// failed (the version that ran before keeps running).
    Upgrade,
    /// Check the resolver's health for a container or probe: exit 0 when `/livez` says alive
    /// (the API answers and a worker is running), 1 otherwise.
    Health {
        /// Check readiness (`/readyz`) instead: every configured worker is ready and the
        /// resolver is not draining or stopping.
        #[arg(id = "ready", long = "ready", action = ArgAction::SetTrue,
              value_parser = flag(Probe::Ready, Probe::Live))]
        probe: Probe,
    },
    /// Reload the configuration files the resolver was started with.
    Reload {
        /// Restart the workers even when their configuration is unchanged.
        #[arg(id = "force", long = "force", action = ArgAction::SetTrue,
              value_parser = flag(ReloadScope::Forced, ReloadScope::Changed))]
        scope: ReloadScope,
    },
    /// Validate configuration files (locally, without a resolver).
    Validate {
        /// Also check that paths exist and have the right permissions.
        #[arg(id = "strict", long = "strict", action = ArgAction::SetTrue,
              value_parser = flag(PathChecks::Strict, PathChecks::Lenient))]
        checks: PathChecks,
        /// The files, deep-merged in order.
        #[arg(default_value = kres_config::DEFAULT_CONFIG_FILE)]
        input_file: Vec<PathBuf>,
    },
    /// Print the JSON schema of the configuration.
    Schema {
        /// Ask the running resolver instead of generating it locally.
        #[arg(id = "live", short = 'l', long = "live", action = ArgAction::SetTrue,
              value_parser = flag(Source::Live, Source::Local))]
        source: Source,
        /// Write the schema to this file instead.
        file: Option<PathBuf>,
    },
    /// Print the OpenAPI 3.1 description of the management API, as the resolver serves it.
    Openapi {
        /// Print the description built into this kresctl instead of asking the resolver.
        #[arg(id = "local", long = "local", action = ArgAction::SetTrue,
              value_parser = flag(Source::Local, Source::Live))]
        source: Source,
        /// Write the document to this file instead.
        file: Option<PathBuf>,
    },
    /// Show the supervised processes: name, kind, pid, state, uptime, readiness, restarts.
    Processes {
        /// Print JSON instead of a table.
        #[arg(id = "json", long = "json", action = ArgAction::SetTrue,
              value_parser = flag(OutputFormat::Json, OutputFormat::Text))]
        format: OutputFormat,
        /// Keep following: print the table again after every process event (spawned, ready,
        /// exited, restarted, hung, failed).
        #[arg(id = "watch", long = "watch", action = ArgAction::SetTrue,
              value_parser = flag(Follow::Watch, Follow::Once))]
        follow: Follow,
    },
    /// Follow what the resolver does, one line per event: processes spawned, ready, exited,
    /// restarted, hung or failed; configuration changes applied, refused or rolled back;
    /// reloads, renews, drain. Runs until the resolver ends the stream.
    Events {
        /// Print each event as its JSON object.
        #[arg(id = "json", long = "json", action = ArgAction::SetTrue,
              value_parser = flag(OutputFormat::Json, OutputFormat::Text))]
        format: OutputFormat,
        /// Resume after this event id (as printed before): the events since, then new ones.
        #[arg(long, value_name = "ID")]
        last_event_id: Option<String>,
    },
    /// Serve the status page (the API's /ui) on a loopback address for as long as kresctl
    /// runs, passing requests on to the API with kresctl's own credentials (its uid on the
    /// socket, or the bearer token of KRES_API_TOKEN_FILE or KRES_API_READ_ONLY_TOKEN_FILE), so
    /// a browser reaches an API on a unix socket. The URL printed holds a secret drawn for this
    /// run (/ui#secret=...): every request but the page's own files needs it (the page sends
    /// it in a header), so the others on this host cannot act with kresctl's role.
    Ui {
        /// The loopback address and port to listen on (port 0: any free port; the URL is
        /// printed).
        #[arg(long, value_name = "ADDRESS:PORT", default_value = "127.0.0.1:0")]
        listen: std::net::SocketAddr,
    },
    /// Print the workers' metrics (JSON, or Prometheus text).
    Metrics {
        /// Print the Prometheus text exposition instead of JSON.
        #[arg(id = "prometheus", long = "prometheus", action = ArgAction::SetTrue,
              value_parser = flag(MetricsFormat::Prometheus, MetricsFormat::Json))]
        format: MetricsFormat,
        /// Print a summary of two scrapes instead: queries per second by transport, rcode
        /// and qtype, latency quantiles, cache hit ratio.
        #[arg(id = "summary", long = "summary", action = ArgAction::SetTrue,
              value_parser = flag(MetricsView::Summary, MetricsView::Raw),
              conflicts_with_all = ["prometheus", "file"])]
        view: MetricsView,
        /// With --summary: seconds between the two scrapes.
        #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = seconds_up_to(std::time::Duration::from_secs(3600)),
              requires = "summary")]
        interval: std::time::Duration,
        /// With --summary: rows shown per table (the busiest first).
        #[arg(long, value_name = "N", default_value_t = 10, requires = "summary")]
        top: usize,
        /// Write the output to this file instead.
        file: Option<PathBuf>,
    },
    /// Work with the resolver's cache.
    #[command(arg_required_else_help = true)]
    Cache(CacheArgs),
    /// Resolve one query with kresd's request tracing: its answer and kresd's verbose log of
    /// it (the workers' log level is not changed). Needs the admin role.
    Trace(super::commands::trace::TraceArgs),
    /// The most frequent clients, names, failing names or types among the workers' recent
    /// answers (the query log, `monitoring.query-log`). `top clients` needs the admin role
    /// (client addresses); the other lists, the read-only role.
    Top(super::commands::query_log::TopArgs),
    /// The workers' recent answers (the query log), filtered; `--follow` prints them as they
    /// come. Needs the admin role (client addresses and single queries are personal data).
    Querylog(super::commands::query_log::QuerylogArgs),
    /// The forward targets and the upstream addresses the workers used recently, with their
    /// round-trip times, queries sent, queries unanswered and error answers.
    Upstreams {
        /// Print the API's JSON.
        #[arg(id = "json", long = "json", action = ArgAction::SetTrue,
              value_parser = flag(OutputFormat::Json, OutputFormat::Text))]
        format: OutputFormat,
    },
    /// The fleet this node is in (`fleet`): every node with the revision of the fleet's
    /// document it runs, the one it refused and why, its workers; nodes behind the newest
    /// document are marked.
    #[command(arg_required_else_help = true)]
    Fleet {
        #[command(subcommand)]
        op: FleetOp,
    },
    /// Show the RPZ zones kept by zone transfer (serial, last transfer, next refresh, expiry)
    /// and the subscribed lists (URL, entries, last fetch, next refresh, ETag).
    Rpz {
        /// Print the API's JSON instead of a table.
        #[arg(id = "json", long = "json", action = ArgAction::SetTrue,
              value_parser = flag(OutputFormat::Json, OutputFormat::Text))]
        format: OutputFormat,
        #[command(subcommand)]
        op: Option<RpzOp>,
    },
}

/// What `kresctl rpz` does beside showing.
#[derive(Subcommand)]
pub enum RpzOp {
    /// Fetch a subscribed list (every list without NAME) now; returns once what came is in
    /// force, or why it was refused.
    Refresh {
        /// The list (its file's name without the extension).
        name: Option<String>,
    },
    /// Which subscribed list (or allowlist) decides a name, without sending a query.
    Check {
        /// The domain name.
        name: String,
        /// A client's address: only the lists its views' tags select count.
        client: Option<String>,
    },
}

/// What `kresctl fleet` does.
#[derive(Subcommand)]
pub enum FleetOp {
    /// List the fleet's nodes.
    Status {
        /// Print the API's JSON.
        #[arg(id = "json", long = "json", action = ArgAction::SetTrue,
              value_parser = flag(OutputFormat::Json, OutputFormat::Text))]
        format: OutputFormat,
    },
    /// Make the fleet's previous document its own again (every node follows), after it is
    /// checked with this node's files. Needs the admin role.
    Rollback,
}

#[derive(Args)]
pub struct CacheArgs {
    #[command(subcommand)]
    pub op: Option<CacheOp>,
}

#[derive(Subcommand)]
pub enum CacheOp {
    /// Purge cache records (all, or under a name).
    Clear {
        /// Clear only the exact name, not the subtree below it.
        #[arg(long = "exact-name")]
        exact_name: bool,
        /// Only records of this type (requires --exact-name).
        #[arg(long = "rr-type")]
        rr_type: Option<String>,
        /// How many records to clear in one go.
        #[arg(long = "chunk-size", default_value_t = 100)]
        chunk_size: u64,
        /// The name to clear; the whole cache when omitted.
        name: Option<String>,
        /// Print JSON.
        #[arg(id = "json", long = "json", conflicts_with = "yaml", action = ArgAction::SetTrue,
              value_parser = flag(OutputFormat::Json, OutputFormat::Yaml))]
        format: OutputFormat,
        // Upstream's flag, kept: YAML is printed without it too.
        /// Print YAML (the default).
        #[arg(long)]
        yaml: bool,
    },
}

/// A shell named by a flag (`--bash`, `--fish`), or not.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ShellFlag(pub Option<CompletionShell>);

/// Shells `completion` writes scripts for.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

impl From<CompletionShell> for clap_complete::Shell {
    fn from(shell: CompletionShell) -> Self {
        match shell {
            CompletionShell::Bash => clap_complete::Shell::Bash,
            CompletionShell::Zsh => clap_complete::Shell::Zsh,
            CompletionShell::Fish => clap_complete::Shell::Fish,
        }
    }
}

#[derive(Args)]
pub struct MigrateArgs {
    /// Get migrated configuration data in JSON format.
    #[arg(id = "json", long = "json", conflicts_with = "yaml", action = ArgAction::SetTrue,
          value_parser = flag(OutputFormat::Json, OutputFormat::Yaml))]
    pub format: OutputFormat,
    // Upstream's flag, kept: YAML is printed without it too.
    /// Get migrated configuration data in YAML format, default.
    #[arg(long)]
    pub yaml: bool,
    /// File with configuration in YAML or JSON format.
    pub input_file: PathBuf,
    /// Optional, output file for migrated configuration in desired output format. If not
    /// specified, migrated configuration is printed.
    pub output_file: Option<PathBuf>,
}

/// Which Lua file `convert` renders.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LuaType {
    /// A kresd worker's configuration.
    Worker,
    /// The policy-loader's configuration.
    PolicyLoader,
}

#[derive(Args)]
pub struct ConvertArgs {
    /// Enable strict rules during validation, e.g. path/file existence and permissions.
    #[arg(id = "strict", long = "strict", action = ArgAction::SetTrue,
          value_parser = flag(PathChecks::Strict, PathChecks::Lenient))]
    pub checks: PathChecks,
    /// The type of Lua script to generate.
    #[arg(long = "type", value_enum, default_value = "worker")]
    pub lua_type: LuaType,
    /// Optional, output file for converted configuration in Lua script. If not specified,
    /// converted configuration is printed.
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// File or combination of files with configuration in YAML or JSON format.
    pub input_file: Vec<PathBuf>,
}

#[derive(Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    pub op: Option<ConfigOp>,
}

#[derive(Subcommand)]
pub enum ConfigOp {
    /// Print the configuration, or the part at a JSON pointer.
    Get {
        /// JSON pointer into the configuration (`/workers`).
        #[arg(short = 'p', long = "path", default_value = "")]
        path: String,
        /// Print JSON.
        #[arg(id = "json", long = "json", conflicts_with = "yaml", action = ArgAction::SetTrue,
              value_parser = flag(OutputFormat::Json, OutputFormat::Yaml))]
        format: OutputFormat,
        // Upstream's flag, kept: YAML is printed without it too.
        /// Print YAML (the default).
        #[arg(long)]
        yaml: bool,
        /// On a node of a fleet, also say where the configuration comes from (on standard
        /// error): the fleet's document with the node's own file laid over it, the paths the
        /// file sets, and the fleet's values the node does not run.
        #[arg(long)]
        explain: bool,
        /// Write the output to this file instead.
        file: Option<PathBuf>,
    },
    /// Set the value at a JSON pointer (from the argument, a file it names, or stdin), and
    /// print what the resolver did. Replacing an object says which of its members are gone.
    Set {
        /// JSON pointer into the configuration (`/workers`).
        #[arg(short = 'p', long = "path", default_value = "")]
        path: String,
        /// A JSON/YAML value, or a file holding one; standard input (read whole) when omitted.
        /// A text of several lines (a zone's records) is taken as it is.
        value_or_file: Option<String>,
        /// Only try the change (validated, planned, its canary run) and print what it would
        /// do; nothing changes.
        #[arg(id = "dry_run", long = "dry-run", action = ArgAction::SetTrue,
              value_parser = flag(Run::DryRun, Run::ForReal))]
        run: Run,
        /// On a node of a fleet: stage the change (see `--canary-node`, `--wave`).
        #[command(flatten)]
        stage: StageArgs,
    },
    /// Delete the value at a JSON pointer, and print what the resolver did.
    Delete {
        /// JSON pointer into the configuration (`/local-data`).
        #[arg(short = 'p', long = "path", default_value = "")]
        path: String,
        /// Only try the change and print what it would do; nothing changes.
        #[arg(id = "dry_run", long = "dry-run", action = ArgAction::SetTrue,
              value_parser = flag(Run::DryRun, Run::ForReal))]
        run: Run,
        /// On a node of a fleet: stage the change (see `--canary-node`, `--wave`).
        #[command(flatten)]
        stage: StageArgs,
    },
    /// Apply a JSON Patch (RFC 6902: a list of `add`, `remove`, `replace`, `move`, `copy` and
    /// `test` operations) to the configuration as one change, and print what the resolver did.
    Patch {
        /// The operations as JSON or YAML, or a file holding them; standard input when
        /// omitted.
        operations_or_file: Option<String>,
        /// Only try the change and print what it would do; nothing changes.
        #[arg(id = "dry_run", long = "dry-run", action = ArgAction::SetTrue,
              value_parser = flag(Run::DryRun, Run::ForReal))]
        run: Run,
        /// On a node of a fleet: stage the change (see `--canary-node`, `--wave`).
        #[command(flatten)]
        stage: StageArgs,
    },
    /// Show what configuration files would change in the running resolver: the differences
    /// path by path, and what the resolver would do (sections changed, workers restarted or
    /// only rules reset, processes started or stopped), from its own dry run. Nothing
    /// changes. As diff(1), exits 0 when there is no difference and 1 when there are (or on
    /// an error).
    Diff {
        /// Print the differences (a JSON Patch) and the resolver's plan as JSON.
        #[arg(id = "json", long = "json", action = ArgAction::SetTrue,
              value_parser = flag(OutputFormat::Json, OutputFormat::Text))]
        format: OutputFormat,
        /// The files, deep-merged in order.
        #[arg(required = true)]
        input_file: Vec<PathBuf>,
    },
}

/// kresctl's completion script for `shell`, generated from its clap definition: what
/// `kresctl completion SHELL` prints and what the package installs.
pub fn completion_script(shell: clap_complete::Shell) -> Vec<u8> {
    if shell == clap_complete::Shell::Bash {
        // Words from kresctl itself: JSON pointers from the schema, as upstream's.
        return super::completion::BASH_SCRIPT.as_bytes().to_vec();
    }
    let mut command = <Cli as clap::CommandFactory>::command();
    // Into a buffer: the generator panics on a write error (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "kresctl", &mut script);
    script
}

/// The help of kresctl, or of a command given without its subcommand, on standard error: a
/// command line without a command is a usage error (exit 2), as upstream's.
pub fn print_help_to_stderr(command: Option<&str>) {
    let mut cli = <Cli as clap::CommandFactory>::command();
    let help = match command {
        None => Some(cli.render_help()),
        Some(name) => cli.find_subcommand_mut(name).map(|sub| sub.render_help()),
    };
    if let Some(help) = help {
        eprint!("{help}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The API command a command line parses into.
    fn parse(args: &[&str]) -> ApiCommand {
        let cli = Cli::try_parse_from(std::iter::once("kresctl").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        match cli.command {
            Some(Command::Api(command)) => command,
            _ => panic!("{args:?}: no API command"),
        }
    }

    #[test]
    fn flags_become_what_they_mean() {
        use OutputFormat::{Json, Text, Yaml};
        assert!(matches!(
            parse(&["health"]),
            ApiCommand::Health { probe: Probe::Live }
        ));
        assert!(matches!(
            parse(&["health", "--ready"]),
            ApiCommand::Health {
                probe: Probe::Ready
            }
        ));
        assert!(matches!(
            parse(&["reload", "--force"]),
            ApiCommand::Reload {
                scope: ReloadScope::Forced
            }
        ));
        assert!(matches!(
            parse(&["pids"]),
            ApiCommand::Pids { format: Text, .. }
        ));
        assert!(matches!(
            parse(&["processes", "--json", "--watch"]),
            ApiCommand::Processes {
                format: Json,
                follow: Follow::Watch
            }
        ));
        assert!(matches!(
            parse(&["apply", "x.yaml"]),
            ApiCommand::Apply {
                mode: ApplyMode::Apply,
                format: Text,
                ..
            }
        ));
        assert!(matches!(
            parse(&["apply", "--dry-run", "--json", "x.yaml"]),
            ApiCommand::Apply {
                mode: ApplyMode::DryRun,
                format: Json,
                ..
            }
        ));
        assert!(matches!(
            parse(&["config", "get"]),
            ApiCommand::Config(ConfigArgs {
                op: Some(ConfigOp::Get { format: Yaml, .. })
            })
        ));
        assert!(matches!(
            parse(&["cache", "clear", "--json"]),
            ApiCommand::Cache(CacheArgs {
                op: Some(CacheOp::Clear { format: Json, .. })
            })
        ));
        assert!(matches!(
            parse(&["metrics", "--prometheus"]),
            ApiCommand::Metrics {
                format: MetricsFormat::Prometheus,
                ..
            }
        ));
        assert!(matches!(
            parse(&["metrics", "--summary", "--interval", "0.5", "--top", "3"]),
            ApiCommand::Metrics {
                view: MetricsView::Summary,
                interval,
                top: 3,
                ..
            } if interval == std::time::Duration::from_millis(500)
        ));
        assert!(matches!(
            parse(&["metrics"]),
            ApiCommand::Metrics {
                view: MetricsView::Raw,
                format: MetricsFormat::Json,
                ..
            }
        ));
        for refused in [
            &["metrics", "--summary", "--prometheus"][..],
            &["metrics", "--summary", "out.json"],
            &["metrics", "--interval", "2"],
            &["metrics", "--summary", "--interval", "0"],
        ] {
            let parsed =
                Cli::try_parse_from(std::iter::once("kresctl").chain(refused.iter().copied()));
            assert!(parsed.is_err(), "{refused:?} accepted");
        }
        assert!(matches!(
            parse(&["schema", "-l"]),
            ApiCommand::Schema {
                source: Source::Live,
                ..
            }
        ));
        assert!(matches!(
            parse(&["openapi"]),
            ApiCommand::Openapi {
                source: Source::Live,
                ..
            }
        ));
        assert!(matches!(
            parse(&["validate", "--strict"]),
            ApiCommand::Validate {
                checks: PathChecks::Strict,
                ..
            }
        ));
        // Usage errors stay usage errors.
        for args in [
            &["apply", "--json", "x.yaml"][..],
            &["config", "get", "--json", "--yaml"],
            &["health", "--ready=true"],
        ] {
            let parsed =
                Cli::try_parse_from(std::iter::once("kresctl").chain(args.iter().copied()));
            assert!(parsed.is_err(), "{args:?}");
        }
    }
}

/// `--canary-node` and `--wave`: a change staged across the fleet the node is in.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct StageArgs {
    /// On a node of a fleet: this node gets the change first and alone; the others wait
    /// until it runs it and its SERVFAIL share held over the soak (the node's
    /// `fleet.rollout`, or 30 s).
    #[arg(long = "canary-node", value_name = "NODE")]
    pub canary_node: Option<String>,
    /// On a node of a fleet: after the canary, the nodes get the change in waves of this
    /// size, a share of the fleet (`10%`) or a number of nodes (`3`).
    #[arg(long = "wave", value_name = "SIZE")]
    pub wave: Option<String>,
}

impl StageArgs {
    /// As the request carries it.
    pub fn of(&self) -> crate::request::Stage<'_> {
        crate::request::Stage {
            canary_node: self.canary_node.as_deref(),
            wave: self.wave.as_deref(),
        }
    }
}
