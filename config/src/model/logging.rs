//! The `logging` section: its description (types, defaults, documentation and rules, as in
//! upstream's datamodel) and the typed form the rest of the crate reads. Field documentation
//! lives in the description only; it is what `kresctl schema` serves.

use super::blocks::*;

/// What `logging.target: from-arg` stands for: part of the validation context, given by the
/// process that validates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTargetArg {
    /// The daemon's own `--logtarget` (it always has one: `stdout` by default).
    Given(LogTarget),
    /// A tool's (`kresctl`), which has no such option: the text of [`crate::LOGTARGET_ENV_VAR`] as
    /// read from the tool's environment, which upstream's manager sets from its
    /// `--logtarget`. Unset or empty: `stdout`; a text naming no target makes `from-arg`
    /// invalid.
    Environment(Option<String>),
}

impl std::default::Default for LogTargetArg {
    /// As the daemon without `--logtarget`: `stdout`.
    fn default() -> Self {
        LogTargetArg::Given(LogTarget::Stdout)
    }
}

impl LogTargetArg {
    /// The target's text (maybe naming no target).
    fn text(&self) -> &str {
        match self {
            LogTargetArg::Given(target) => target.as_str(),
            LogTargetArg::Environment(Some(text)) if !text.is_empty() => text,
            LogTargetArg::Environment(_) => LogTarget::Stdout.as_str(),
        }
    }
}

/// Logging levels, in upstream's order.
pub const LOG_LEVELS: &[&str] = &["crit", "err", "warning", "notice", "info", "debug"];

const LOG_TARGETS: &[&str] = &["syslog", "stderr", "stdout"];

/// Groups that name our own processes and manager parts rather than kresd log groups: the
/// first entries of [`LOG_GROUPS`]. The Lua generator leaves them out of `log_groups()`.
pub const NON_KRESD_LOG_GROUPS: &[&str] = LOG_GROUPS.split_at(8).0;

/// Every accepted logging group (processes, manager parts, kresd groups).
pub const LOG_GROUPS: &[&str] = &[
    "manager",
    "supervisord",
    "policy-loader",
    "kresd",
    "cache-gc",
    "files",
    "metrics",
    "server",
    "system",
    "cache",
    "io",
    "net",
    "ta",
    "tasent",
    "tasign",
    "taupd",
    "tls",
    "gnutls",
    "tls_cl",
    "xdp",
    "doh",
    "dnssec",
    "hint",
    "plan",
    "iterat",
    "valdtr",
    "resolv",
    "select",
    "zoncut",
    "cookie",
    "statis",
    "rebind",
    "worker",
    "policy",
    "daf",
    "timejm",
    "timesk",
    "graphi",
    "prefil",
    "primin",
    "srvstl",
    "wtchdg",
    "nsid",
    "dnstap",
    "tests",
    "dotaut",
    "http",
    "contrl",
    "module",
    "devel",
    "renum",
    "exterr",
    "rules",
    "prlayr",
    "defer",
    "doq",
    "ngtcp2",
];

pub(super) fn logging() -> ObjectDef {
    let mut dnstap = section(
        "knot_resolver.datamodel.logging_schema.DnstapSchema",
        Some("Logging DNS queries and responses to a unix socket."),
        vec![
            f(
                "enable",
                Ty::Bool,
                json!(false),
                "Enable/disable DNS queries logging.",
            ),
            f(
                "unix-socket",
                opt(v(&vt::WRITABLE_FILE_PATH)),
                Value::Null,
                "Path to unix domain socket where dnstap messages will be sent.",
            ),
            f(
                "log-queries",
                Ty::Bool,
                json!(false),
                "Log queries from downstream in wire format.",
            ),
            f(
                "log-responses",
                Ty::Bool,
                json!(false),
                "Log responses to downstream in wire format.",
            ),
            f(
                "log-tcp-rtt",
                Ty::Bool,
                json!(false),
                "Log TCP RTT (Round-trip time).",
            ),
        ],
    );
    dnstap.validate = Some(|m, _, path| {
        if is_true(m, "enable") && !is_set(m, "unix-socket") {
            return fail(
                path,
                "DNS queries logging enabled, but 'unix-socket' not specified",
            );
        }
        Ok(())
    });
    let mut d = section(
        "knot_resolver.datamodel.logging_schema.LoggingSchema",
        Some("Logging and debugging configuration."),
        vec![
            f("level", Ty::Literal(LOG_LEVELS), json!("notice"), "Global logging level."),
            f("target", Ty::Union(vec![Ty::Literal(LOG_TARGETS), Ty::Literal(&["from-arg"])]), json!("from-arg"), "Global logging stream target. If 'from-arg', uses '--logtarget' argument ('stdout' by default)."),
            f("groups", opt(list(Ty::Literal(LOG_GROUPS))), Value::Null, "List of groups for which 'debug' logging level is set."),
            f("dnstap", obj(dnstap), json!({}), "Logging DNS requests and responses to a unix socket."),
        ],
    );
    d.transform = Some(|m, ctx, path| {
        if m.get("target").and_then(Value::as_str) == Some("from-arg") {
            let target = ctx.logtarget_arg.text();
            if !LOG_TARGETS.contains(&target) {
                return fail(
                    path,
                    format!("logging target '{target}' from '--logtarget' argument is invalid"),
                );
            }
            m.insert("target".into(), Value::String(target.to_owned()));
        }
        Ok(())
    });
    d.validate = Some(|m, _, path| {
        if let Some(Value::Array(groups)) = m.get("groups") {
            for (i, g) in groups.iter().enumerate() {
                if groups[..i].contains(g) {
                    return fail(
                        path,
                        format!(
                            "duplicate logging group '{}' on index {i}",
                            g.as_str().unwrap_or_default()
                        ),
                    );
                }
            }
        }
        Ok(())
    });
    d
}

/// Logging verbosity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogLevel {
    Crit,
    Err,
    Warning,
    Notice,
    Info,
    Debug,
}

impl LogLevel {
    /// The configuration spelling (`notice`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Crit => "crit",
            LogLevel::Err => "err",
            LogLevel::Warning => "warning",
            LogLevel::Notice => "notice",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
        }
    }
}

/// Where logs go (`from-arg` resolved).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogTarget {
    Syslog,
    Stderr,
    Stdout,
}

impl LogTarget {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            LogTarget::Syslog => "syslog",
            LogTarget::Stderr => "stderr",
            LogTarget::Stdout => "stdout",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct DnstapSchema {
    pub enable: bool,
    pub unix_socket: Option<PathBuf>,
    pub log_queries: bool,
    pub log_responses: bool,
    pub log_tcp_rtt: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct LoggingSchema {
    pub level: LogLevel,
    pub target: LogTarget,
    /// Groups with debug logging (values from [`LOG_GROUPS`]).
    pub groups: Option<Vec<String>>,
    pub dnstap: DnstapSchema,
}
