//! `knot-resolver`: the daemon.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Knot Resolver: supervisor and manager of kresd workers.
#[derive(Parser)]
#[command(name = "knot-resolver", version = knot_resolver::VERSION, disable_version_flag = true)]
struct Args {
    /// Configuration file(s); several are deep-merged in order.
    #[arg(short = 'c', long = "config", num_args = 1.., default_value = knot_resolver::daemon::DEFAULT_CONFIG)]
    config: Vec<PathBuf>,
    /// Print the version and exit.
    #[arg(short = 'V', long = "version", action = clap::ArgAction::Version)]
    version: Option<bool>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    knot_resolver::daemon::run(args.config)
}
