//! Where log lines go. On a terminal or a plain pipe: a compact human format on the stream
//! `logging.target` names. Under systemd (our stream is the one `JOURNAL_STREAM` names) or with
//! target `syslog`: journald's native protocol, with `PRIORITY` from the level, the process's
//! own name as `SYSLOG_IDENTIFIER` and no timestamp of ours. The root process also writes its
//! children's output lines (the supervisor's `child` events) under the child's name (`kresd0`,
//! `policy-loader`, `cache-gc`) with the child's pid as `SYSLOG_PID`.
//!
//! The level starts as `--loglevel` and becomes `logging.level` once a configuration is loaded
//! ([`Logging::configure`]), like upstream's. The manager process follows every applied
//! configuration's `logging` ([`Logging::follow`]; `debug` when the `manager` group is listed,
//! as upstream's manager does); the root keeps what it read at start-up.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{Compact, DefaultFields, Format};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, reload, EnvFilter, Layer, Registry};

use supervisor::output::OutputLevel;

use kres_config::{LoadedConfig, LogLevel, LogTarget, LoggingSchema};
use kres_wire::environment::Environment;

/// The supervisor's target for lines its children wrote.
const CHILD_TARGET: &str = "child";

/// At most this many children get a journal identity of their own; lines of any further child
/// go under the daemon's identifier (the set of children is small and fixed in practice).
const MAX_CHILD_IDENTITIES: usize = 256;

/// How far into a child's line its level is looked for: the tags before the message and the
/// message's first word fit.
const LEVEL_PREFIX: usize = 64;

/// The level a line a child wrote is logged at (and its journal priority). kresd writes no
/// level into its lines, but its warnings and errors say so in the message's first words,
/// after the log group's tag and a debug line's query tag (`[system] warning: …`,
/// `[rules ] error parsing zone file …`, `[net   ] ERROR: …`); kres-cache-gc's likewise
/// (`Error …`). Anything on standard error (Lua errors, crashes) is at least a warning.
///
/// It runs in the root, on what children wrote, so it only compares the first
/// [`LEVEL_PREFIX`] bytes with a few fixed words: nothing is allocated, nothing can fail.
pub fn child_line_level(line: &str, stream: supervisor::output::Stream) -> OutputLevel {
    use supervisor::output::Stream;
    let head = &line.as_bytes()[..line.len().min(LEVEL_PREFIX)];
    let level = level_of_message(message_of(head));
    match (level, stream) {
        (OutputLevel::Info, Stream::Stderr) => OutputLevel::Warn,
        (level, _) => level,
    }
}

/// The message of a kresd line: what follows its bracketed tags (at most two: a debug line's
/// `[12345.00]` and the log group's `[iter  ]`) and the spaces after them.
fn message_of(mut head: &[u8]) -> &[u8] {
    for _ in 0..2 {
        let trimmed = head.trim_ascii_start();
        let Some(after_open) = trimmed.strip_prefix(b"[") else {
            break;
        };
        match after_open.iter().position(|&b| b == b']') {
            Some(close) => head = &after_open[close + 1..],
            None => break,
        }
    }
    head.trim_ascii_start()
}

/// The level a message's first words give it.
fn level_of_message(message: &[u8]) -> OutputLevel {
    const ERRORS: [&[u8]; 4] = [b"error", b"fatal", b"critical", b"crit:"];
    const WARNINGS: [&[u8]; 2] = [b"warning", b"deprecation warning"];
    let starts = |word: &[u8]| {
        message.len() >= word.len() && message[..word.len()].eq_ignore_ascii_case(word)
    };
    if ERRORS.into_iter().any(starts) {
        OutputLevel::Error
    } else if WARNINGS.into_iter().any(starts) {
        OutputLevel::Warn
    } else {
        OutputLevel::Info
    }
}

/// The `--loglevel` spellings (upstream's), as configuration levels.
pub fn level_from_arg(arg: &str) -> Option<LogLevel> {
    Some(match arg {
        "critical" => LogLevel::Crit,
        "error" => LogLevel::Err,
        "warning" => LogLevel::Warning,
        "notice" => LogLevel::Notice,
        "info" => LogLevel::Info,
        "debug" => LogLevel::Debug,
        _ => return None,
    })
}

/// The `--logtarget` spellings.
pub fn target_from_arg(arg: &str) -> Option<LogTarget> {
    Some(match arg {
        "stdout" => LogTarget::Stdout,
        "stderr" => LogTarget::Stderr,
        "syslog" => LogTarget::Syslog,
        _ => return None,
    })
}

/// The sink lines go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sink {
    Stdout = 0,
    Stderr = 1,
    Journal = 2,
}

impl Sink {
    fn from_u8(v: u8) -> Sink {
        match v {
            0 => Sink::Stdout,
            1 => Sink::Stderr,
            _ => Sink::Journal,
        }
    }

    /// The sink for `target`: the journal for `syslog`, and for a stream systemd connected to
    /// the journal (`journal_stream`, from `JOURNAL_STREAM`, names its device and inode).
    pub fn for_target(target: LogTarget, journal_stream: Option<&OsStr>) -> Sink {
        match target {
            LogTarget::Syslog => Sink::Journal,
            LogTarget::Stdout
                if kres_wire::environment::connected_to_journal(
                    io::stdout().as_fd(),
                    journal_stream,
                ) =>
            {
                Sink::Journal
            }
            LogTarget::Stderr
                if kres_wire::environment::connected_to_journal(
                    io::stderr().as_fd(),
                    journal_stream,
                ) =>
            {
                Sink::Journal
            }
            LogTarget::Stdout => Sink::Stdout,
            LogTarget::Stderr => Sink::Stderr,
        }
    }
}

/// The filter for a configuration level, unless `directive` (from [`LOG_OVERRIDE_VAR`](kres_wire::environment::LOG_OVERRIDE_VAR)) parses.
fn filter(level: LogLevel, directive: Option<&str>) -> EnvFilter {
    let level = match level {
        LogLevel::Crit | LogLevel::Err => "error",
        LogLevel::Warning => "warn",
        LogLevel::Notice | LogLevel::Info => "info",
        LogLevel::Debug => "debug",
    };
    directive
        .and_then(|d| EnvFilter::try_new(d).ok())
        .unwrap_or_else(|| EnvFilter::new(format!("{level},{CHILD_TARGET}=info")))
}

/// The installed logging: its level and sink can change once the configuration is known.
pub struct Logging {
    filter: reload::Handle<EnvFilter, Registry>,
    /// The [`LOG_OVERRIDE_VAR`](kres_wire::environment::LOG_OVERRIDE_VAR) directive, read once at the start.
    directive: Option<String>,
    /// Whether journald's socket answered when the sinks were built.
    journal_available: bool,
    /// `JOURNAL_STREAM`: which of our streams systemd connected to the journal.
    journal_stream: Option<OsString>,
}

static SINK: AtomicU8 = AtomicU8::new(Sink::Stderr as u8);

impl Logging {
    /// Install the process's logging, once. `identifier` is the process's name in the journal;
    /// `env` gives the [`LOG_OVERRIDE_VAR`](kres_wire::environment::LOG_OVERRIDE_VAR) directive and the journal stream. Later calls return
    /// `None` and change nothing.
    pub fn init(
        level: LogLevel,
        target: LogTarget,
        identifier: &str,
        env: &Environment,
    ) -> Option<&'static Logging> {
        static INSTALLED: OnceLock<Logging> = OnceLock::new();
        if INSTALLED.get().is_some() {
            return None;
        }
        let directive = env.log_override.clone();
        let (filter_layer, handle) = reload::Layer::new(filter(level, directive.as_deref()));
        let sinks = Sinks::new(identifier);
        let journal_available = sinks.journal.is_some();
        let installed = tracing_subscriber::registry()
            .with(filter_layer)
            .with(sinks)
            .try_init()
            .is_ok();
        if !installed {
            return None;
        }
        let logging = INSTALLED.get_or_init(|| Logging {
            filter: handle,
            directive,
            journal_available,
            journal_stream: env.journal_stream.clone(),
        });
        logging.set_target(target);
        Some(logging)
    }

    /// Apply a loaded configuration's `logging.level` and `logging.target`.
    pub fn configure(&self, level: LogLevel, target: LogTarget) {
        if let Err(e) = self.filter.reload(filter(level, self.directive.as_deref())) {
            tracing::warn!("cannot change the log level: {e}");
        }
        self.set_target(target);
    }

    /// Apply `logging` as the manager process logs: its level, `debug` with the `manager`
    /// group.
    pub fn configure_manager(&self, logging: &LoggingSchema) {
        self.configure(manager_level(logging), logging.target);
    }

    /// Apply the `logging` of every configuration `config` publishes from now on, until its
    /// sender is gone.
    pub async fn follow(
        &self,
        mut config: tokio::sync::watch::Receiver<std::sync::Arc<LoadedConfig>>,
    ) {
        let mut applied = config.borrow_and_update().model.logging.clone();
        while config.changed().await.is_ok() {
            let logging = config.borrow_and_update().model.logging.clone();
            if logging != applied {
                self.configure_manager(&logging);
                tracing::debug!(
                    level = logging.level.as_str(),
                    "the manager's logging follows the configuration"
                );
                applied = logging;
            }
        }
    }

    fn set_target(&self, target: LogTarget) {
        let mut sink = Sink::for_target(target, self.journal_stream.as_deref());
        if sink == Sink::Journal && !self.journal_available {
            sink = Sink::Stderr;
        }
        SINK.store(sink as u8, Ordering::Relaxed);
    }
}

/// The manager's level for `logging`: `debug` when its group is listed, else the level.
pub fn manager_level(logging: &LoggingSchema) -> LogLevel {
    if logging.groups.iter().flatten().any(|g| g == "manager") {
        LogLevel::Debug
    } else {
        logging.level
    }
}

/// The sink currently chosen.
fn current_sink() -> Sink {
    Sink::from_u8(SINK.load(Ordering::Relaxed))
}

type Human<S, W> = fmt::Layer<S, DefaultFields, Format<Compact>, W>;

/// Every sink, one of which takes each event.
struct Sinks<S> {
    stdout: Human<S, fn() -> io::Stdout>,
    stderr: Human<S, fn() -> io::Stderr>,
    journal: Option<Journal>,
}

impl<S> Sinks<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn new(identifier: &str) -> Sinks<S> {
        let journal = tracing_journald::layer().ok().map(|own| Journal {
            own: own.with_syslog_identifier(identifier.to_owned()),
            children: Mutex::new(HashMap::new()),
        });
        Sinks {
            stdout: fmt::layer()
                .compact()
                .with_ansi(false)
                .with_writer(io::stdout as fn() -> io::Stdout),
            stderr: fmt::layer()
                .compact()
                .with_ansi(false)
                .with_writer(io::stderr as fn() -> io::Stderr),
            journal,
        }
    }
}

impl<S> Layer<S> for Sinks<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        self.stdout.on_new_span(attrs, id, ctx.clone());
        self.stderr.on_new_span(attrs, id, ctx.clone());
        if let Some(j) = &self.journal {
            j.own.on_new_span(attrs, id, ctx);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        self.stdout.on_record(id, values, ctx.clone());
        self.stderr.on_record(id, values, ctx.clone());
        if let Some(j) = &self.journal {
            j.own.on_record(id, values, ctx);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        match (current_sink(), &self.journal) {
            (Sink::Journal, Some(journal)) => journal.on_event(event, ctx),
            (Sink::Stdout, _) => self.stdout.on_event(event, ctx),
            _ => self.stderr.on_event(event, ctx),
        }
    }
}

/// The journal: our own identity, and one per child whose lines we pass on.
struct Journal {
    own: tracing_journald::Layer,
    /// Child name → (its pid, a layer writing under its name and pid).
    children: Mutex<HashMap<String, (i64, tracing_journald::Layer)>>,
}

impl Journal {
    fn on_event<S>(&self, event: &Event<'_>, ctx: Context<'_, S>)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        if event.metadata().target() != CHILD_TARGET {
            return self.own.on_event(event, ctx);
        }
        let mut who = ChildFields::default();
        event.record(&mut who);
        let (Some(name), Some(pid)) = (who.name, who.pid) else {
            return self.own.on_event(event, ctx);
        };
        let Ok(mut children) = self.children.lock() else {
            return self.own.on_event(event, ctx);
        };
        let fresh = children.get(&name).is_none_or(|(known, _)| *known != pid);
        if fresh && (children.len() < MAX_CHILD_IDENTITIES || children.contains_key(&name)) {
            if let Ok(layer) = tracing_journald::layer() {
                let layer = layer
                    .with_syslog_identifier(name.clone())
                    .with_custom_fields([("SYSLOG_PID", pid.to_string())]);
                children.insert(name.clone(), (pid, layer));
            }
        }
        match children.get(&name) {
            Some((_, layer)) => layer.on_event(event, ctx),
            None => self.own.on_event(event, ctx),
        }
    }
}

/// The `name` and `pid` fields of a child's output event.
#[derive(Default)]
struct ChildFields {
    name: Option<String>,
    pid: Option<i64>,
}

impl Visit for ChildFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "name" {
            self.name = Some(value.to_owned());
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if field.name() == "pid" {
            self.pid = Some(value);
        }
    }

    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use supervisor::output::Stream;

    /// Each row: a line, its stream, the level it is logged at.
    fn check(rows: &[(&str, Stream, OutputLevel)]) {
        for &(line, stream, want) in rows {
            assert_eq!(
                child_line_level(line, stream),
                want,
                "{line:?} on {stream:?}"
            );
        }
    }

    #[test]
    fn kresd_lines_keep_the_level_their_words_give() {
        use OutputLevel::{Error, Info, Warn};
        use Stream::{Stderr, Stdout};
        check(&[
            ("[system] warning: hard limit for number of file-descriptors is only 4096 but recommended value is 524288", Stdout, Warn),
            ("[rules ] error parsing zone file `/run/x' line 1: unexpected data", Stdout, Error),
            ("[net   ] ERROR: cannot bind", Stdout, Error),
            ("[system] deprecation WARNING: use log_level() instead of verbose()", Stdout, Warn),
            ("[system] WARNING: unknown log group 'x'", Stdout, Warn),
            ("[12345.00][iter  ] error in answer", Stdout, Error),
            ("Error: cache is not open", Stdout, Error),
            ("[system] quitting", Stdout, Info),
            ("[rules ] an error-free line", Stdout, Info),
            ("", Stdout, Info),
            ("[", Stdout, Info),
            ("[unclosed error", Stdout, Info),
            // Standard error is at least a warning.
            ("luajit: something went wrong", Stderr, Warn),
            ("[system] quitting", Stderr, Warn),
            ("[rules ] error parsing zone file", Stderr, Error),
            // Only the first bytes are read: a level word far into the line says nothing.
            (&format!("[system] {} error", "x".repeat(100)), Stdout, Info),
        ]);
    }
}
