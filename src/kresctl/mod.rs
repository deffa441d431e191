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

async fn execute(client: &ApiClient, command: Command) -> Result<(), client::ClientError> {
    match command {
        Command::Config(ConfigArgs { op: None }) => {
            let _ = <Cli as clap::CommandFactory>::command()
                .find_subcommand_mut("config")
                .map(|c| c.print_help());
        }
        Command::Config(ConfigArgs {
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
        Command::Pids { proc_type, json } => {
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
        Command::Stop => {
            client.request("POST", "/stop", None).await?.ok()?;
        }
        Command::Metrics { prometheus, file } => {
            let path = if prometheus {
                "/metrics/prometheus"
            } else {
                "/metrics/json"
            };
            let response = client.request("GET", path, None).await?;
            if prometheus && response.status == 404 {
                return Err(client::ClientError::Status {
                    status: 404,
                    body: "Prometheus is unavailable due to missing optional dependencies"
                        .to_owned(),
                });
            }
            let body = response.ok()?;
            let text = if prometheus {
                String::from_utf8_lossy(&body).into_owned()
            } else {
                let value: Value = serde_json::from_slice(&body)?;
                format!("{}\n", serde_json::to_string_pretty(&value)?)
            };
            emit(&text, file.as_deref())?;
        }
        Command::Cache(CacheArgs { op: None }) => {
            let _ = <Cli as clap::CommandFactory>::command()
                .find_subcommand_mut("cache")
                .map(|c| c.print_help());
        }
        Command::Cache(CacheArgs {
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
            let body = Value::Object(body);
            // Validate locally first, like upstream: a bad request never reaches the resolver.
            if let Err(errors) = crate::cache_clear::CacheClear::from_json(&body) {
                return Err(client::ClientError::Invalid(errors.join("\n")));
            }
            let response = client
                .request("POST", "/cache/clear", Some(serde_json::to_vec(&body)?))
                .await?
                .ok()?;
            let value: Value = if response.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&response)?
            };
            let text = if json {
                format!("{}\n", serde_json::to_string_pretty(&value)?)
            } else {
                to_yaml(&value)
            };
            print!("{text}");
        }
    }
    Ok(())
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
