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
pub mod output;
pub mod request;

use std::process::ExitCode;

use clap::Parser;

pub use cli::{completion_script, Cli};
pub use output::to_yaml;

use cli::Command;
use client::{ApiClient, ClientError, Target};
use commands::exit_code;

/// What `kresctl -V` says: our version, and the version of the kresd installed here (the one
/// a daemon on this machine runs), from `kresd --version`.
pub fn version_line() -> String {
    let kresd = crate::manager::Executables::discover().kresd;
    match crate::manager::executables::kresd_version(&kresd) {
        Ok(version) => format!(
            "kresctl {} (kresd {version}, {})",
            crate::build_version(),
            kresd.display()
        ),
        Err(e) => format!("kresctl {} (kresd: {e})", crate::build_version()),
    }
}

/// The default API socket when nothing else says where it is.
pub const DEFAULT_SOCKET: &str = "/run/knot-resolver/kres-api.sock";

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.version == cli::ShowVersion::Yes {
        return commands::exit_code(output::println(&version_line()).map_err(ClientError::from));
    }
    let command = match cli.command {
        // A command is required, as upstream's says: a usage error.
        None => {
            cli::print_help_to_stderr(None);
            return ExitCode::from(2);
        }
        Some(Command::Convert(args)) => return exit_code(commands::convert::convert(&args)),
        Some(Command::Migrate(args)) => return exit_code(commands::migrate::command(&args)),
        Some(Command::Completion {
            shell,
            bash,
            fish,
            args,
        }) => return commands::completion(bash.0.or(fish.0).unwrap_or(shell), args.as_deref()),
        Some(Command::Api(command)) => command,
    };
    if let Some(code) = commands::offline(&command) {
        return code;
    }
    let target = match Target::discover(cli.socket.as_deref(), cli.config.as_deref()) {
        Ok(t) => t,
        Err(e) => return exit_code(Err(e)),
    };
    let client = ApiClient::new(target);
    crate::block_on("kresctl", async {
        exit_code(commands::execute(&client, command).await)
    })
}
