//! `kresctl`: the command-line client of the management API, with upstream's commands, flags,
//! socket discovery and exit codes (0 success, 1 operational or validation error, 2 usage
//! error), plus the offline commands `validate`, `convert`, `migrate`, `schema` and
//! `completion`.
//!
//! The command line is defined in [`cli`], each family of commands lives in [`commands`],
//! every request the API is asked is a variant of [`request::Request`] that [`client`]
//! sends, and [`output`] prints the answers in the format asked for.

pub mod cli;
pub mod client;
pub mod commands;
pub mod completion;
pub mod error;
pub mod flags;
pub mod output;
pub mod request;

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use kres_wire::environment::Environment;

pub use cli::{completion_script, Cli};
pub use output::to_yaml;

use cli::Command;
use client::{ApiClient, ClientError, Target};
use commands::exit_code;

/// What `kresctl -V` says: our version, and the version of the kresd installed here (the one
/// a daemon on this machine runs), from `kresd --version`; `env` says where kresd is.
pub fn version_line(env: &Environment) -> String {
    let kresd = kres_wire::programs::kresd(env);
    match kres_wire::programs::kresd_version(&kresd) {
        Ok(version) => format!(
            "kresctl {} (kresd {version}, {})",
            kres_wire::version::build_version(),
            kresd.display()
        ),
        Err(e) => format!(
            "kresctl {} (kresd: {e})",
            kres_wire::version::build_version()
        ),
    }
}

/// The default API socket when nothing else says where it is.
pub const DEFAULT_SOCKET: &str = "/run/knot-resolver/kres-api.sock";

/// Run kresctl's command line in the environment `env` it was started with.
pub fn main(env: Environment) -> ExitCode {
    let env = Arc::new(env);
    let cli = Cli::parse();
    let exit_code = |result| exit_code(result, &env);
    if cli.version == cli::ShowVersion::Yes {
        return exit_code(output::println(&version_line(&env)).map_err(ClientError::from));
    }
    let command = match cli.command {
        // A command is required, as upstream's says: a usage error.
        None => {
            cli::print_help_to_stderr(None);
            return ExitCode::from(2);
        }
        Some(Command::Convert(args)) => {
            return commands::exit_code(commands::convert::convert(&args, &env), &env)
        }
        Some(Command::Migrate(args)) => {
            return commands::exit_code(commands::migrate::command(&args), &env)
        }
        Some(Command::Completion {
            shell,
            bash,
            fish,
            args,
        }) => {
            return commands::completion(bash.0.or(fish.0).unwrap_or(shell), args.as_deref(), &env)
        }
        Some(Command::Api(command)) => command,
    };
    if let Some(code) = commands::offline(&command, &env) {
        return code;
    }
    let target = match Target::discover(cli.socket.as_deref(), cli.config.as_deref()) {
        Ok(t) => t,
        Err(e) => return exit_code(Err(e)),
    };
    let client = ApiClient::new(target).in_environment(env.clone());
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return exit_code(Err(ClientError::from(e))),
    };
    runtime.block_on(async { commands::exit_code(commands::execute(&client, command).await, &env) })
}
