//! `kresctl`: the command-line client of the management API, with upstream's commands, flags,
//! socket discovery and exit codes (0 success, 1 operational error, 2 usage error).

pub mod client;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use serde_json::Value;

use client::{ApiClient, Target};

/// The default API socket when nothing else says where it is.
pub const DEFAULT_SOCKET: &str = "/run/knot-resolver/kres-api.sock";

/// Command-line utility that helps communicate with Knot Resolver's management API.
#[derive(Parser)]
#[command(name = "kresctl", version = crate::VERSION)]
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
    /// Stop the resolver (all its processes).
    Stop,
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
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let Some(command) = cli.command else {
        let _ = <Cli as clap::CommandFactory>::command().print_help();
        return ExitCode::SUCCESS;
    };
    let command = match command {
        Command::Convert(args) => return convert(&args),
        Command::Api(command) => command,
    };
    let target = match Target::discover(cli.socket.as_deref(), cli.config.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let client = ApiClient::new(target);
    match runtime.block_on(execute(&client, command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
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
    let loaded = match crate::config::load_files(files, args.strict) {
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

async fn execute(client: &ApiClient, command: ApiCommand) -> Result<(), client::ClientError> {
    match command {
        ApiCommand::Config(ConfigArgs { op: None }) => {
            let _ = <Cli as clap::CommandFactory>::command()
                .find_subcommand_mut("config")
                .map(|c| c.print_help());
        }
        ApiCommand::Config(ConfigArgs {
            op:
                Some(ConfigOp::Get {
                    path,
                    json,
                    yaml: _,
                    file,
                }),
        }) => {
            let body = client
                .request("GET", &format!("/v1/config{path}"), None)
                .await?
                .ok()?;
            let value: Value = if body.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&body)?
            };
            let text = if json {
                format!("{}\n", serde_json::to_string_pretty(&value)?)
            } else {
                to_yaml(&value)
            };
            match file {
                Some(f) => {
                    std::fs::write(&f, text)?;
                    println!("saved to: {}", f.display());
                }
                None => print!("{text}"),
            }
        }
        ApiCommand::Pids { proc_type, json } => {
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
        }
        ApiCommand::Stop => {
            client.request("POST", "/stop", None).await?.ok()?;
        }
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
