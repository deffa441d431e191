//! kresctl's commands, one module per family, and the dispatch from the parsed command line
//! to them: [`offline`] runs what needs no resolver, [`execute`] the rest against the API.

pub mod cache;
pub mod config;
pub mod control;
pub mod convert;
pub mod diff;
pub mod documents;
pub mod events;
pub mod fleet;
pub mod metrics;
pub mod migrate;
pub mod outcome;
pub mod processes;
pub mod query_log;
pub mod rpz;
pub mod trace;
pub mod ui;

use std::path::PathBuf;
use std::process::ExitCode;

use super::cli::{
    self, ApiCommand, ApplyMode, CacheArgs, CompletionShell, ConfigArgs, Follow, MetricsView,
};
use super::client::{ApiClient, ClientError};
use super::output::WriteError;
use kres_wire::environment::Environment;

/// The error of a command that works on files, without a resolver (`convert`, `migrate`).
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file that is no YAML or JSON: the parser's words alone.
    #[error("{0}")]
    Unparsable(#[source] kres_config::ParseError),
    #[error("{0}")]
    Config(#[source] kres_config::ConfigError),
    #[error("{}: the configuration is not a mapping", .0.display())]
    NotAMapping(PathBuf),
    /// Standard output could not be written (closed: the command ends quietly).
    #[error("{0}")]
    Output(#[from] WriteError),
}

/// An error a command ends with.
pub trait CommandError: std::fmt::Display {
    /// Whether it is only that standard output's reader is gone.
    fn is_closed_output(&self) -> bool;
}

impl CommandError for ClientError {
    fn is_closed_output(&self) -> bool {
        matches!(self, ClientError::Output(WriteError::Closed))
    }
}

impl CommandError for FileError {
    fn is_closed_output(&self) -> bool {
        matches!(self, FileError::Output(WriteError::Closed))
    }
}

/// Exit 0 on success, and quietly when standard output's reader is gone (`| head`);
/// otherwise print the error and exit 1.
/// `env` tells whether standard error is the journal's stream.
pub fn exit_code<E: CommandError>(result: Result<(), E>, env: &Environment) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is_closed_output() => ExitCode::SUCCESS,
        Err(e) => {
            eprint!("{}", error_lines(&e.to_string(), Stderr::detect(env)));
            ExitCode::from(1)
        }
    }
}

/// Where our standard error goes, as far as priorities are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stderr {
    /// The journal (run by systemd: `ExecReload=kresctl reload`): each line gets the
    /// `<3>` prefix, so a refused reload is logged at error priority, not at info.
    Journal,
    /// A terminal, a pipe or a file: the text as it is.
    Plain,
}

impl Stderr {
    fn detect(env: &Environment) -> Stderr {
        if kres_wire::environment::stderr_is_journal(env.journal_stream.as_deref()) {
            Stderr::Journal
        } else {
            Stderr::Plain
        }
    }
}

/// An error's text as written to standard error.
fn error_lines(text: &str, stderr: Stderr) -> String {
    match stderr {
        // An outcome that is no error to tell (`config diff` found differences).
        _ if text.is_empty() => String::new(),
        Stderr::Plain => format!("{text}\n"),
        Stderr::Journal => text.lines().map(|l| format!("<3>{l}\n")).collect(),
    }
}

/// `kresctl completion SHELL`: print the script; with `--args WORD…`, the words to offer
/// after them, space-separated on one line (bash; fish gets nothing, as from upstream's).
pub fn completion(shell: CompletionShell, args: Option<&[String]>, env: &Environment) -> ExitCode {
    let text = match (args, shell) {
        (None, _) => String::from_utf8_lossy(&cli::completion_script(shell.into())).into_owned(),
        (Some(args), CompletionShell::Bash) => {
            let command = <cli::Cli as clap::CommandFactory>::command();
            let args = if args.is_empty() {
                &[String::new()][..]
            } else {
                args
            };
            format!("{}\n", super::completion::words(&command, args).join(" "))
        }
        (Some(_), CompletionShell::Zsh | CompletionShell::Fish) => String::new(),
    };
    exit_code(super::output::print(&text).map_err(ClientError::from), env)
}

/// Run `command` if it needs no resolver (`validate`, `schema` and `openapi --local`), and
/// say how it ended; `None` for a command that needs the API.
/// `env` is kresctl's environment.
pub fn offline(command: &ApiCommand, env: &Environment) -> Option<ExitCode> {
    match command {
        ApiCommand::Validate { checks, input_file } => Some(ExitCode::from(
            u8::try_from(kres_config::validate_command(
                input_file,
                *checks,
                logtarget_arg(env),
            ))
            .unwrap_or(1),
        )),
        ApiCommand::Schema {
            source: cli::Source::Local,
            file,
        } => Some(exit_code(
            documents::local(documents::Document::Schema, file.as_deref()),
            env,
        )),
        ApiCommand::Openapi {
            source: cli::Source::Local,
            file,
        } => Some(exit_code(
            documents::local(documents::Document::OpenApi, file.as_deref()),
            env,
        )),
        _ => None,
    }
}

/// What `logging.target: from-arg` means to kresctl, which has no `--logtarget`: the
/// configuration's variable, as `env` has it.
pub fn logtarget_arg(env: &Environment) -> kres_config::LogTargetArg {
    kres_config::LogTargetArg::Environment(env.logtarget.clone())
}

/// Run a command against the API.
pub async fn execute(client: &ApiClient, command: ApiCommand) -> Result<(), ClientError> {
    match command {
        // Refused by the command line (`arg_required_else_help`).
        ApiCommand::Config(ConfigArgs { op: None }) => cli::print_help_to_stderr(Some("config")),
        ApiCommand::Config(ConfigArgs { op: Some(op) }) => config::run(client, op).await?,
        ApiCommand::Apply {
            mode: ApplyMode::DryRun,
            format,
            input_file,
        } => {
            diff::diff(client, &input_file, format).await?;
        }
        ApiCommand::Apply {
            mode: ApplyMode::Apply,
            input_file,
            ..
        } => diff::apply(client, &input_file).await?,
        ApiCommand::Pids { proc_type, format } => {
            processes::pids(client, &proc_type, format).await?;
        }
        ApiCommand::Stop => control::stop(client).await?,
        ApiCommand::Drain => control::drain(client).await?,
        ApiCommand::Upgrade => control::upgrade(client).await?,
        ApiCommand::Health { probe } => control::health(client, probe).await?,
        ApiCommand::Reload { scope } => control::reload(client, scope).await?,
        // Run by `offline` before any connection is made.
        ApiCommand::Validate { .. } => {}
        ApiCommand::Schema { file, .. } => documents::live_schema(client, file.as_deref()).await?,
        ApiCommand::Openapi { file, .. } => {
            documents::live_openapi(client, file.as_deref()).await?;
        }
        ApiCommand::Processes {
            format,
            follow: Follow::Once,
        } => processes::print_processes(client, format).await?,
        ApiCommand::Processes {
            format,
            follow: Follow::Watch,
        } => events::watch_processes(client, format).await?,
        ApiCommand::Events {
            format,
            last_event_id,
        } => events::follow(client, format, last_event_id.as_deref()).await?,
        ApiCommand::Ui { listen } => ui::serve(client.clone(), listen).await?,
        ApiCommand::Metrics {
            view: MetricsView::Summary,
            interval,
            top,
            ..
        } => metrics::summary(client, interval, top).await?,
        ApiCommand::Metrics {
            format,
            file,
            view: MetricsView::Raw,
            ..
        } => {
            metrics::metrics(client, format, file.as_deref()).await?;
        }
        ApiCommand::Cache(CacheArgs { op: None }) => cli::print_help_to_stderr(Some("cache")),
        ApiCommand::Cache(CacheArgs { op: Some(op) }) => cache::run(client, op).await?,
        ApiCommand::Rpz { format, op: None } => rpz::print_zones(client, format).await?,
        ApiCommand::Rpz {
            format,
            op: Some(op),
        } => rpz::run(client, op, format).await?,
        ApiCommand::Trace(args) => trace::run(client, args).await?,
        ApiCommand::Top(args) => query_log::top(client, args).await?,
        ApiCommand::Querylog(args) => query_log::querylog(client, args).await?,
        ApiCommand::Upstreams { format } => query_log::upstreams(client, format).await?,
        ApiCommand::Fleet {
            op: cli::FleetOp::Status { format },
        } => fleet::status(client, format).await?,
        ApiCommand::Fleet {
            op: cli::FleetOp::Rollback,
        } => fleet::rollback(client).await?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_carry_the_error_priority_only_into_the_journal() {
        let text = "reload refused\nconfig.yaml: /workers: not a number";
        assert_eq!(error_lines(text, Stderr::Plain), format!("{text}\n"));
        assert_eq!(
            error_lines(text, Stderr::Journal),
            "<3>reload refused\n<3>config.yaml: /workers: not a number\n"
        );
    }
}
