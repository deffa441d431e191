//! `kresctl`: the command-line client of the management API, with upstream's commands, flags,
//! socket discovery and exit codes (0 success, 1 operational or validation error, 2 usage
//! error), plus the offline commands `validate`, `convert`, `migrate`, `schema` and
//! `completion`.

pub mod client;
pub mod diff;
pub mod events;
pub mod migrate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use serde_json::Value;

use client::{ApiClient, Target};

/// The default API socket when nothing else says where it is.
pub const DEFAULT_SOCKET: &str = "/run/knot-resolver/kres-api.sock";

/// Exit codes, shown by `kresctl --help`.
const EXIT_CODES: &str = "Exit codes:
  0  success
  1  operational or validation error (the resolver is unreachable, the API refused the
     request, a file is invalid or cannot be read or written)
  2  usage error (unknown command or option, missing or invalid argument)";

#[derive(Parser)]
#[command(
    name = "kresctl",
    version = crate::VERSION,
    about = "Command-line utility that helps communicate with Knot Resolver's management API.",
    after_long_help = EXIT_CODES
)]
pub struct Cli {
    /// Path or URL of the management API socket.
    #[arg(
        short = 's',
        long = "socket",
        conflicts_with = "config",
        global = false
    )]
    socket: Option<String>,
    /// Configuration file whose `management` section names the API socket.
    #[arg(short = 'c', long = "config")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Converts JSON or YAML configuration to Lua script.
    Convert(ConvertArgs),
    /// Migrates JSON or YAML configuration to the newer version.
    Migrate(MigrateArgs),
    /// Print a shell completion script for kresctl.
    Completion {
        /// The shell: bash, zsh or fish.
        #[arg(value_enum, default_value = "bash")]
        shell: CompletionShell,
    },
    #[command(flatten)]
    Api(ApiCommand),
}

/// Commands that talk to the management API.
#[derive(Subcommand)]
enum ApiCommand {
    /// Read or change the running configuration.
    Config(ConfigArgs),
    /// List the PIDs of the resolver's processes.
    Pids {
        /// kresd, gc or all.
        #[arg(default_value = "all")]
        proc_type: String,
        /// Print the full process objects as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Make configuration files the running configuration (as `PUT /v1/config`), refused if
    /// it changed since kresctl read it.
    Apply {
        /// Only show what would change, as `kresctl config diff` does; nothing changes.
        #[arg(long)]
        dry_run: bool,
        /// With --dry-run: print JSON.
        #[arg(long, requires = "dry_run")]
        json: bool,
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
        #[arg(long)]
        ready: bool,
    },
    /// Reload the configuration files the resolver was started with.
    Reload {
        /// Restart the workers even when their configuration is unchanged.
        #[arg(long)]
        force: bool,
    },
    /// Validate configuration files (locally, without a resolver).
    Validate {
        /// Also check that paths exist and have the right permissions.
        #[arg(long)]
        strict: bool,
        /// The files, deep-merged in order.
        #[arg(default_value = crate::daemon::DEFAULT_CONFIG)]
        input_file: Vec<PathBuf>,
    },
    /// Print the JSON schema of the configuration.
    Schema {
        /// Ask the running resolver instead of generating it locally.
        #[arg(short = 'l', long)]
        live: bool,
        /// Write the schema to this file instead.
        file: Option<PathBuf>,
    },
    /// Print the OpenAPI 3.1 description of the management API, as the resolver serves it.
    Openapi {
        /// Print the description built into this kresctl instead of asking the resolver.
        #[arg(long)]
        local: bool,
        /// Write the document to this file instead.
        file: Option<PathBuf>,
    },
    /// Show the supervised processes: name, kind, pid, state, uptime, readiness, restarts.
    Processes {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Keep following: print the table again after every process event (spawned, ready,
        /// exited, restarted, hung, failed).
        #[arg(long)]
        watch: bool,
    },
    /// Follow what the resolver does, one line per event: processes spawned, ready, exited,
    /// restarted, hung or failed; configuration changes applied, refused or rolled back;
    /// reloads, renews, drain. Runs until the resolver ends the stream.
    Events {
        /// Print each event as its JSON object.
        #[arg(long)]
        json: bool,
        /// Resume after this event id (as printed before): the events since, then new ones.
        #[arg(long, value_name = "ID")]
        last_event_id: Option<String>,
    },
    /// Print the workers' metrics (JSON, or Prometheus text).
    Metrics {
        /// Print the Prometheus text exposition instead of JSON.
        #[arg(long)]
        prometheus: bool,
        /// Write the output to this file instead.
        file: Option<PathBuf>,
    },
    /// Work with the resolver's cache.
    Cache(CacheArgs),
}

#[derive(Args)]
struct CacheArgs {
    #[command(subcommand)]
    op: Option<CacheOp>,
}

#[derive(Subcommand)]
enum CacheOp {
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
        #[arg(long, conflicts_with = "yaml")]
        json: bool,
        /// Print YAML (the default).
        #[arg(long)]
        yaml: bool,
    },
}

/// Shells `completion` writes scripts for.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Args)]
struct MigrateArgs {
    /// Get migrated configuration data in JSON format.
    #[arg(long, conflicts_with = "yaml")]
    json: bool,
    /// Get migrated configuration data in YAML format, default.
    #[arg(long)]
    yaml: bool,
    /// File with configuration in YAML or JSON format.
    input_file: PathBuf,
    /// Optional, output file for migrated configuration in desired output format. If not
    /// specified, migrated configuration is printed.
    output_file: Option<PathBuf>,
}

/// Which Lua file `convert` renders.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LuaType {
    /// A kresd worker's configuration.
    Worker,
    /// The policy-loader's configuration.
    PolicyLoader,
}

#[derive(Args)]
struct ConvertArgs {
    /// Enable strict rules during validation, e.g. path/file existence and permissions.
    #[arg(long)]
    strict: bool,
    /// The type of Lua script to generate.
    #[arg(long = "type", value_enum, default_value = "worker")]
    lua_type: LuaType,
    /// Optional, output file for converted configuration in Lua script. If not specified,
    /// converted configuration is printed.
    #[arg(short = 'o', long = "output")]
    output: Option<PathBuf>,
    /// File or combination of files with configuration in YAML or JSON format.
    input_file: Vec<PathBuf>,
}

#[derive(Args)]
struct ConfigArgs {
    #[command(subcommand)]
    op: Option<ConfigOp>,
}

#[derive(Subcommand)]
enum ConfigOp {
    /// Print the configuration, or the part at a JSON pointer.
    Get {
        /// JSON pointer into the configuration (`/workers`).
        #[arg(short = 'p', long = "path", default_value = "")]
        path: String,
        /// Print JSON.
        #[arg(long, conflicts_with = "yaml")]
        json: bool,
        /// Print YAML (the default).
        #[arg(long)]
        yaml: bool,
        /// Write the output to this file instead.
        file: Option<PathBuf>,
    },
    /// Set the value at a JSON pointer (from the argument, a file it names, or stdin).
    Set {
        /// JSON pointer into the configuration (`/workers`).
        #[arg(short = 'p', long = "path", default_value = "")]
        path: String,
        /// A JSON/YAML value, or a file holding one; read from stdin when omitted.
        value_or_file: Option<String>,
    },
    /// Delete the value at a JSON pointer.
    Delete {
        /// JSON pointer into the configuration (`/local-data`).
        #[arg(short = 'p', long = "path", default_value = "")]
        path: String,
    },
    /// Show what configuration files would change in the running resolver: the differences
    /// path by path, and what the resolver would do (sections changed, workers restarted or
    /// only rules reset, processes started or stopped), from its own dry run. Nothing
    /// changes.
    Diff {
        /// Print the differences (a JSON Patch) and the resolver's plan as JSON.
        #[arg(long)]
        json: bool,
        /// The files, deep-merged in order.
        #[arg(required = true)]
        input_file: Vec<PathBuf>,
    },
}

/// kresctl's completion script for `shell`, generated from its clap definition: what
/// `kresctl completion SHELL` prints and what the package installs.
pub fn completion_script(shell: clap_complete::Shell) -> Vec<u8> {
    let mut command = <Cli as clap::CommandFactory>::command();
    // Into a buffer: the generator panics on a write error (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "kresctl", &mut script);
    script
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let Some(command) = cli.command else {
        let _ = <Cli as clap::CommandFactory>::command().print_help();
        return ExitCode::SUCCESS;
    };
    let command = match command {
        Command::Convert(args) => return convert(&args),
        Command::Migrate(args) => return migrate(&args),
        Command::Completion { shell } => {
            let shell = match shell {
                CompletionShell::Bash => clap_complete::Shell::Bash,
                CompletionShell::Zsh => clap_complete::Shell::Zsh,
                CompletionShell::Fish => clap_complete::Shell::Fish,
            };
            use std::io::Write;
            return match std::io::stdout().write_all(&completion_script(shell)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("cannot write the completion script: {e}");
                    ExitCode::from(1)
                }
            };
        }
        Command::Api(command) => command,
    };
    // Local commands need no resolver.
    match &command {
        ApiCommand::Validate { strict, input_file } => {
            return ExitCode::from(
                u8::try_from(crate::config::validate_command(
                    input_file,
                    if *strict {
                        crate::config::PathChecks::Strict
                    } else {
                        crate::config::PathChecks::Lenient
                    },
                ))
                .unwrap_or(1),
            );
        }
        ApiCommand::Schema { live: false, file } | ApiCommand::Openapi { local: true, file } => {
            let document = match &command {
                ApiCommand::Schema { .. } => crate::config::json_schema(),
                _ => crate::api::openapi::document().clone(),
            };
            let text = format!(
                "{}\n",
                serde_json::to_string_pretty(&document).unwrap_or_default()
            );
            return match emit(&text, file.as_deref()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::from(1)
                }
            };
        }
        _ => {}
    }
    let target = match Target::discover(cli.socket.as_deref(), cli.config.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    let client = ApiClient::new(target);
    crate::block_on("kresctl", async {
        match execute(&client, command).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(1)
            }
        }
    })
}

/// `kresctl convert`: validate the files locally (no API) and print or write the Lua the
/// manager would generate, like upstream (the text, then a newline, on stdout; exit 1 with the
/// error on stderr).
fn convert(args: &ConvertArgs) -> ExitCode {
    let default = [PathBuf::from(crate::config::DEFAULT_CONFIG_FILE)];
    let files = if args.input_file.is_empty() {
        &default[..]
    } else {
        &args.input_file[..]
    };
    let checks = if args.strict {
        crate::config::PathChecks::Strict
    } else {
        crate::config::PathChecks::Lenient
    };
    let loaded =
        match crate::config::load_files(files, checks, crate::config::LogTargetArg::from_env()) {
            Ok(loaded) => loaded,
            Err(crate::config::ConfigError::Parse { source, .. }) => {
                eprintln!("{source}");
                return ExitCode::from(1);
            }
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(1);
            }
        };
    let lua = match args.lua_type {
        LuaType::Worker => crate::lua::render_worker(&loaded.model),
        LuaType::PolicyLoader => crate::lua::render_policy_loader(&loaded.model),
    };
    match &args.output {
        Some(path) => {
            if let Err(e) = std::fs::write(path, lua) {
                eprintln!("cannot write {}: {e}", path.display());
                return ExitCode::from(1);
            }
        }
        None => println!("{lua}"),
    }
    ExitCode::SUCCESS
}

/// `kresctl migrate`: rewrite an older configuration (offline), print what changed and the
/// result, like upstream.
fn migrate(args: &MigrateArgs) -> ExitCode {
    let text = match std::fs::read_to_string(&args.input_file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cannot read {}: {e}", args.input_file.display());
            return ExitCode::from(1);
        }
    };
    // JSON first, then YAML, whatever the file is called (as upstream).
    let parsed = serde_json::from_str::<Value>(&text).or_else(|_| {
        crate::config::parse_document(&text, std::path::Path::new("input.yaml"))
            .map_err(|e| e.to_string())
    });
    let doc = match parsed {
        Ok(Value::Object(doc)) => doc,
        Ok(Value::Null) => serde_json::Map::new(),
        Ok(_) => {
            eprintln!(
                "{}: the configuration is not a mapping",
                args.input_file.display()
            );
            return ExitCode::from(1);
        }
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    let (doc, log) = migrate::migrate(doc);
    for line in log {
        println!("{line}");
    }
    let doc = Value::Object(doc);
    let dumped = if args.json {
        format!("{doc}\n")
    } else {
        to_yaml(&doc)
    };
    match &args.output_file {
        Some(path) => {
            if let Err(e) = std::fs::write(path, dumped) {
                eprintln!("cannot write {}: {e}", path.display());
                return ExitCode::from(1);
            }
        }
        None => {
            println!("\nNew migrated configuration (v{}):", crate::VERSION);
            println!("---");
            print!("{dumped}");
        }
    }
    ExitCode::SUCCESS
}

async fn execute(client: &ApiClient, command: ApiCommand) -> Result<(), client::ClientError> {
    match command {
        ApiCommand::Config(ConfigArgs { op: None }) => print_help("config"),
        ApiCommand::Config(ConfigArgs {
            op:
                Some(ConfigOp::Get {
                    path,
                    json,
                    yaml: _,
                    file,
                }),
        }) => config_get(client, &path, json, file.as_deref()).await?,
        ApiCommand::Config(ConfigArgs {
            op:
                Some(ConfigOp::Set {
                    path,
                    value_or_file,
                }),
        }) => config_set(client, &path, value_or_file).await?,
        ApiCommand::Config(ConfigArgs {
            op: Some(ConfigOp::Delete { path }),
        }) => {
            client
                .request("DELETE", &format!("/v1/config{path}"), None)
                .await?
                .ok()?;
        }
        ApiCommand::Config(ConfigArgs {
            op: Some(ConfigOp::Diff { json, input_file }),
        }) => diff::diff(client, &input_file, json).await?,
        ApiCommand::Apply {
            dry_run: true,
            json,
            input_file,
        } => diff::diff(client, &input_file, json).await?,
        ApiCommand::Apply {
            dry_run: false,
            input_file,
            ..
        } => diff::apply(client, &input_file).await?,
        ApiCommand::Pids { proc_type, json } => pids(client, &proc_type, json).await?,
        ApiCommand::Stop => {
            client.request("POST", "/stop", None).await?.ok()?;
        }
        ApiCommand::Drain => {
            let body = client.request("POST", "/drain", None).await?.ok()?;
            print!("{}", String::from_utf8_lossy(&body));
        }
        ApiCommand::Upgrade => upgrade(client).await?,
        ApiCommand::Health { ready } => {
            let path = if ready { "/readyz" } else { "/livez" };
            let body = client.request("GET", path, None).await?.ok()?;
            print!("{}", String::from_utf8_lossy(&body));
        }
        ApiCommand::Reload { force } => {
            let path = if force { "/reload/force" } else { "/reload" };
            client.request("POST", path, None).await?.ok()?;
        }
        // Handled in `main` before any connection is made.
        ApiCommand::Validate { .. } => {}
        ApiCommand::Schema { live: _, file } => {
            let body = client.request("GET", "/schema", None).await?.ok()?;
            emit(&String::from_utf8_lossy(&body), file.as_deref())?;
        }
        ApiCommand::Openapi { local: _, file } => {
            let response = client.request("GET", "/openapi.json", None).await?;
            if response.status == 404 {
                return Err(client::ClientError::NotOffered(
                    "the server does not offer an OpenAPI description (no /openapi.json route: \
                     upstream's manager or an older knot-resolver); `kresctl openapi --local` \
                     prints this kresctl's"
                        .into(),
                ));
            }
            let mut text = String::from_utf8_lossy(&response.ok()?).into_owned();
            if !text.ends_with('\n') {
                text.push('\n');
            }
            emit(&text, file.as_deref())?;
        }
        ApiCommand::Processes { json, watch: false } => print_processes(client, json).await?,
        ApiCommand::Processes { json, watch: true } => {
            events::watch_processes(client, json).await?;
        }
        ApiCommand::Events {
            json,
            last_event_id,
        } => events::follow(client, json, last_event_id.as_deref()).await?,
        ApiCommand::Metrics { prometheus, file } => {
            metrics(client, prometheus, file.as_deref()).await?;
        }
        ApiCommand::Cache(CacheArgs { op: None }) => print_help("cache"),
        ApiCommand::Cache(CacheArgs {
            op:
                Some(CacheOp::Clear {
                    exact_name,
                    rr_type,
                    chunk_size,
                    name,
                    json,
                    yaml: _,
                }),
        }) => {
            let mut body = serde_json::Map::new();
            if let Some(name) = name {
                body.insert("name".into(), Value::String(name));
            }
            body.insert("exact-name".into(), Value::Bool(exact_name));
            if let Some(t) = rr_type {
                body.insert("rr-type".into(), Value::String(t));
            }
            body.insert("chunk-size".into(), Value::from(chunk_size));
            cache_clear(client, Value::Object(body), json).await?;
        }
    }
    Ok(())
}

/// `kresctl processes`: the process table, as a table or JSON.
async fn print_processes(client: &ApiClient, json: bool) -> Result<(), client::ClientError> {
    let value = json_body(&client.request("GET", "/processes", None).await?.ok()?)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print!("{}", processes_table(&value));
    }
    Ok(())
}

/// The help of a command given without its subcommand, as upstream prints it.
fn print_help(command: &str) {
    let _ = <Cli as clap::CommandFactory>::command()
        .find_subcommand_mut(command)
        .map(|c| c.print_help());
}

/// A JSON response body; an empty one is `null`.
fn json_body(body: &[u8]) -> Result<Value, client::ClientError> {
    if body.is_empty() {
        Ok(Value::Null)
    } else {
        Ok(serde_json::from_slice(body)?)
    }
}

/// A value as pretty JSON or as YAML, newline-terminated.
fn json_or_yaml(value: &Value, json: bool) -> Result<String, client::ClientError> {
    if json {
        Ok(format!("{}\n", serde_json::to_string_pretty(value)?))
    } else {
        Ok(to_yaml(value))
    }
}

async fn config_get(
    client: &ApiClient,
    path: &str,
    json: bool,
    file: Option<&std::path::Path>,
) -> Result<(), client::ClientError> {
    let body = client
        .request("GET", &format!("/v1/config{path}"), None)
        .await?
        .ok()?;
    emit(&json_or_yaml(&json_body(&body)?, json)?, file)
}

/// `config set`: the value is given, or a file holding it, or typed on standard input.
async fn config_set(
    client: &ApiClient,
    path: &str,
    value_or_file: Option<String>,
) -> Result<(), client::ClientError> {
    let text = match value_or_file {
        Some(v) if std::path::Path::new(&v).is_file() => std::fs::read_to_string(&v)?,
        Some(v) => v,
        None => {
            use std::io::BufRead;
            eprint!("Type new configuration: ");
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line)?;
            line
        }
    };
    let value = crate::config::parse_document(&text, std::path::Path::new("value.yaml"))
        .map_err(|e| client::ClientError::Invalid(e.to_string()))?;
    let body = client
        .request(
            "PUT",
            &format!("/v1/config{path}"),
            Some(serde_json::to_vec(&value)?),
        )
        .await?
        .ok()?;
    if !body.is_empty() {
        println!("{}", String::from_utf8_lossy(&body));
    }
    Ok(())
}

/// How long `kresctl upgrade` waits for the upgraded daemon to say how it went.
const UPGRADE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// `GET /upgrade`: the running version and the last upgrade's generation (0: none yet).
async fn upgrade_status(client: &ApiClient) -> Result<(String, u64, Value), client::ClientError> {
    let response = client.request("GET", "/upgrade", None).await?;
    if response.status == 404 {
        return Err(client::ClientError::NotOffered(
            "the server does not offer in-place upgrades (no /upgrade route: upstream's \
             manager?); restart it instead"
                .into(),
        ));
    }
    let status: Value = serde_json::from_slice(&response.ok()?)?;
    let version = status["version"].as_str().unwrap_or("?").to_owned();
    let generation = status["last"]["generation"].as_u64().unwrap_or(0);
    Ok((version, generation, status))
}

async fn upgrade(client: &ApiClient) -> Result<(), client::ClientError> {
    let (before, generation, _) = upgrade_status(client).await?;
    client.request("POST", "/upgrade", None).await?.ok()?;
    eprintln!("upgrading from {before}…");
    let deadline = tokio::time::Instant::now() + UPGRADE_TIMEOUT;
    loop {
        // While the manager process is replaced, the request waits in the API socket's
        // backlog; an error here is a moment of it, not the end.
        if let Ok((now, g, status)) = upgrade_status(client).await {
            if g > generation {
                let last = &status["last"];
                if last["outcome"] == "upgraded" {
                    println!(
                        "upgraded: {} -> {now}",
                        last["from"].as_str().unwrap_or(&before)
                    );
                    return Ok(());
                }
                return Err(client::ClientError::Failed(format!(
                    "upgrade failed: {}; {now} runs on",
                    last["error"].as_str().unwrap_or("no reason given")
                )));
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(client::ClientError::Timeout(UPGRADE_TIMEOUT));
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

async fn pids(client: &ApiClient, proc_type: &str, json: bool) -> Result<(), client::ClientError> {
    let body = client
        .request("GET", &format!("/processes/{proc_type}"), None)
        .await?
        .ok()?;
    let value: Value = serde_json::from_slice(&body)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else if let Value::Array(list) = value {
        for p in list {
            if let Some(pid) = p.get("pid").and_then(Value::as_i64) {
                println!("{pid}");
            }
        }
    }
    Ok(())
}

async fn metrics(
    client: &ApiClient,
    prometheus: bool,
    file: Option<&std::path::Path>,
) -> Result<(), client::ClientError> {
    let path = if prometheus {
        "/metrics/prometheus"
    } else {
        "/metrics/json"
    };
    let response = client.request("GET", path, None).await?;
    if prometheus && response.status == 404 {
        return Err(client::ClientError::Status {
            status: 404,
            body: "Prometheus is unavailable due to missing optional dependencies".to_owned(),
        });
    }
    let body = response.ok()?;
    let text = if prometheus {
        String::from_utf8_lossy(&body).into_owned()
    } else {
        json_or_yaml(&serde_json::from_slice(&body)?, true)?
    };
    emit(&text, file)
}

async fn cache_clear(
    client: &ApiClient,
    body: Value,
    json: bool,
) -> Result<(), client::ClientError> {
    // Validate locally first, like upstream: a bad request never reaches the resolver.
    if let Err(errors) = crate::cache_clear::CacheClear::from_json(&body) {
        return Err(client::ClientError::Invalid(errors.join("\n")));
    }
    let response = client
        .request("POST", "/cache/clear", Some(serde_json::to_vec(&body)?))
        .await?
        .ok()?;
    print!("{}", json_or_yaml(&json_body(&response)?, json)?);
    Ok(())
}

/// The process table as an operator reads it: like `supervisorctl status`, plus readiness,
/// restarts and the last exit.
fn processes_table(value: &Value) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let age = |v: &Value| -> String {
        match v.as_f64() {
            Some(t) if now >= t => {
                let s = (now - t) as u64;
                format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
            }
            _ => "-".to_owned(),
        }
    };
    let mut out = format!(
        "{:<16} {:<14} {:>8} {:<9} {:>10} {:>12} {:>8}  {}\n",
        "NAME", "KIND", "PID", "STATE", "UPTIME", "READY-SINCE", "RESTARTS", "LAST EXIT"
    );
    for p in value.as_array().into_iter().flatten() {
        let s = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or("-").to_owned();
        let pid = p
            .get("pid")
            .and_then(Value::as_i64)
            .map(|x| x.to_string())
            .unwrap_or_else(|| "-".into());
        let last_exit = match p.get("last_exit") {
            Some(Value::Object(m)) => {
                if let Some(code) = m.get("code") {
                    format!("exit {code}")
                } else if let Some(sig) = m.get("signaled").and_then(|v| v.get("signal")) {
                    format!("signal {sig}")
                } else {
                    "-".into()
                }
            }
            _ => "-".into(),
        };
        let last_exit = match p.get("kill_reason").and_then(Value::as_str) {
            Some(reason) => format!("{last_exit} ({reason})"),
            None => last_exit,
        };
        out.push_str(&format!(
            "{:<16} {:<14} {:>8} {:<9} {:>10} {:>12} {:>8}  {}\n",
            s("name"),
            s("kind"),
            pid,
            s("state"),
            age(p.get("since").unwrap_or(&Value::Null)),
            age(p.get("ready_at").unwrap_or(&Value::Null)),
            p.get("restarts").and_then(Value::as_u64).unwrap_or(0),
            last_exit
        ));
    }
    out
}

/// Print `text`, or write it to `file` and say so.
fn emit(text: &str, file: Option<&std::path::Path>) -> Result<(), client::ClientError> {
    match file {
        Some(f) => {
            std::fs::write(f, text)?;
            println!("saved to: {}", f.display());
        }
        None => print!("{text}"),
    }
    Ok(())
}

/// Render a JSON value as YAML.
pub fn to_yaml(value: &Value) -> String {
    let yaml = json_to_yaml(value);
    let mut out = String::new();
    let mut emitter = yaml_rust2::YamlEmitter::new(&mut out);
    if emitter.dump(&yaml).is_err() {
        return format!("{value}\n");
    }
    let trimmed = out
        .strip_prefix("---\n")
        .or_else(|| out.strip_prefix("--- "))
        .unwrap_or(&out);
    format!("{trimmed}\n")
}

fn json_to_yaml(value: &Value) -> yaml_rust2::Yaml {
    use yaml_rust2::Yaml;
    match value {
        Value::Null => Yaml::Null,
        Value::Bool(b) => Yaml::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Yaml::Integer(i),
            None => Yaml::Real(n.to_string()),
        },
        Value::String(s) => Yaml::String(s.clone()),
        Value::Array(a) => Yaml::Array(a.iter().map(json_to_yaml).collect()),
        Value::Object(m) => Yaml::Hash(
            m.iter()
                .map(|(k, v)| (Yaml::String(k.clone()), json_to_yaml(v)))
                .collect(),
        ),
    }
}
