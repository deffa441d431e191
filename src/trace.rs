//! Trace one query: a worker resolves a name with kresd's request tracing (`req.trace_log`,
//! as Knot Resolver 5's `http_trace` and kresd's own watchdog do), and its verbose log and
//! final answer come back to the caller. Only that request is traced: the workers' log level
//! and groups stay as they are, and nothing of it reaches the workers' log.
//!
//! The control socket answers one command at a time, in the worker's event loop, so the
//! resolution cannot be waited for inside a command. One command starts it, with callbacks
//! that collect the log (up to [`LOG_LIMIT`] bytes) and the answer into a table of the
//! worker keyed by a random trace id; short polls read that entry until the answer is in or
//! the deadline passes, and a last command forgets an entry nobody will read.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;

use crate::cache_clear::RR_TYPES;
use crate::config::types::DomainName;
use crate::control::{self, ControlError};
use crate::lua::quote;
use crate::wire::trace::Trace;

/// How long a trace may take when the caller gives no timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest timeout a caller may ask for.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);

/// The most log a trace collects, in bytes; entries past it are dropped and the trace says
/// it was truncated.
pub const LOG_LIMIT: usize = 256 * 1024;

/// How long a trace may take and how much log it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceLimits {
    /// How long to wait for the answer, the start and every poll included.
    pub timeout: Duration,
    /// The most log kept, in bytes.
    pub log_bytes: usize,
}

impl TraceLimits {
    /// `timeout`, and the log limited to [`LOG_LIMIT`].
    pub fn with_timeout(timeout: Duration) -> TraceLimits {
        TraceLimits {
            timeout,
            log_bytes: LOG_LIMIT,
        }
    }
}

/// The worker's global table of traces in progress, by trace id.
const RUNS: &str = "__kres_trace_runs";

/// How long forgetting a trace may take (a worker that does not answer keeps the entry,
/// which its callbacks bound).
const FORGET_TIMEOUT: Duration = Duration::from_secs(1);

/// The first pause between two polls; it doubles up to [`POLL_MAX`].
const POLL_FIRST: Duration = Duration::from_millis(2);

/// The longest pause between two polls.
const POLL_MAX: Duration = Duration::from_millis(50);

/// Why a trace was not made.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("'{name}' is not a domain name: {reason}")]
    InvalidName {
        name: String,
        reason: crate::config::types::TypeError,
    },
    #[error("'{0}' is not a known RR type")]
    UnknownType(String),
    #[error("the timeout must be between 1 ms and {max:?}", max = MAX_TIMEOUT)]
    InvalidTimeout,
    #[error("the worker refused the trace: {0}")]
    Refused(String),
    #[error("the worker's control socket failed")]
    Control(#[source] ControlError),
    #[error("the worker gave no answer within {0:?}")]
    TimedOut(Duration),
    #[error("the worker answered an unexpected {0}")]
    Unexpected(Value),
}

/// A validated query to trace: a domain name and a known RR type, class IN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceQuery {
    /// The name, absolute or not, in its ASCII (punycode) form.
    name: String,
    /// The RR type's mnemonic, upper case.
    rr_type: &'static str,
}

impl TraceQuery {
    /// Validate `name` (a domain name; IDNA names are encoded) and `rr_type` (a mnemonic
    /// such as `AAAA`, in any case).
    pub fn new(name: &str, rr_type: &str) -> Result<TraceQuery, TraceError> {
        let parsed = DomainName::parse(name).map_err(|reason| TraceError::InvalidName {
            name: name.to_owned(),
            reason,
        })?;
        let rr_type = RR_TYPES
            .iter()
            .find(|t| t.eq_ignore_ascii_case(rr_type))
            .ok_or_else(|| TraceError::UnknownType(rr_type.to_owned()))?;
        Ok(TraceQuery {
            name: parsed.punycode().to_owned(),
            rr_type,
        })
    }

    /// The name kresd is given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The RR type asked.
    pub fn rr_type(&self) -> &'static str {
        self.rr_type
    }

    /// The command that starts the resolution under trace id `id`, collecting at most
    /// `log_limit` bytes of log. It answers `{started = true}`, `{unknown_type = true}` when
    /// kresd knows no such type, or `{error = …}` when it cannot make the query.
    pub fn render_start(&self, id: &str, log_limit: usize) -> String {
        let (id, name, rr_type) = (quote(id), quote(&self.name), quote(self.rr_type));
        [
            "(function()",
            &format!("local ty = kres.type[{rr_type}]"),
            "if ty == nil then return {unknown_type = true} end",
            &format!("{RUNS} = {RUNS} or {{}}"),
            "local run = {log = {}, size = 0, truncated = false, done = false}",
            &format!("{RUNS}[{id}] = run"),
            "local ffi = require('ffi')",
            "local log_cb = ffi.cast('trace_log_f', function(_, msg)",
            "jit.off(true, true)",
            "local entry = ffi.string(msg)",
            &format!("if run.size + #entry > {log_limit} then run.truncated = true"),
            "else run.size = run.size + #entry; table.insert(run.log, entry) end",
            "end)",
            &format!("local ok, err = pcall(resolve, {name}, ty, kres.class.IN, {{}},"),
            "function(pkt, req)",
            "req.trace_log = nil; log_cb:free()",
            "if pkt ~= nil then",
            "run.rcode = kres.tostring.rcode[pkt:rcode()] or tostring(pkt:rcode())",
            "run.answer = {}",
            "for _, rr in ipairs(pkt:rrsets(kres.section.ANSWER)) do",
            "table.insert(run.answer, rr:txt_dump()) end",
            "end",
            "run.done = true",
            "end,",
            "function(req) req.trace_log = log_cb end)",
            // An error comes before the request exists (kresd cannot make the query): the
            // log callback was never attached.
            &format!(
                "if not ok then {RUNS}[{id}] = nil; log_cb:free(); \
                 return {{error = tostring(err)}} end"
            ),
            // A request that did not start may still finish, and free the callback then.
            &format!(
                "if not err then {RUNS}[{id}] = nil; \
                 return {{error = 'kresd did not start the resolution'}} end"
            ),
            "return {started = true}",
            "end)()",
        ]
        .join(" ")
    }
}

/// The command that reads trace `id`: `{done = false}` while it runs; when it is over, the
/// log and answer, and the entry is forgotten.
fn render_poll(id: &str) -> String {
    let id = quote(id);
    format!(
        "(function() local run = {RUNS} and {RUNS}[{id}] \
         if run == nil then return {{missing = true}} end \
         if not run.done then return {{done = false}} end \
         {RUNS}[{id}] = nil \
         return {{done = true, rcode = run.rcode, answer = run.answer, log = run.log, \
         truncated = run.truncated}} end)()"
    )
}

/// The command that forgets trace `id` (its callbacks still run to their end).
fn render_forget(id: &str) -> String {
    let id = quote(id);
    format!("(function() if {RUNS} then {RUNS}[{id}] = nil end return true end)()")
}

/// What a worker answers a poll with, once the trace is over.
#[derive(Debug, Deserialize)]
struct Finished {
    /// Absent when kresd dropped the answer.
    rcode: Option<String>,
    /// The answer section's RRsets, each as text (one line per record).
    #[serde(default, deserialize_with = "lua_list")]
    answer: Vec<String>,
    /// The log entries, each ending with a newline.
    #[serde(default, deserialize_with = "lua_list")]
    log: Vec<String>,
    #[serde(default)]
    truncated: bool,
}

/// A Lua list of strings, which kresd's JSON writes as `{}` when it is empty.
fn lua_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    match Value::deserialize(d)? {
        Value::Array(items) => Ok(items
            .into_iter()
            .map(|v| match v {
                Value::String(s) => s,
                other => other.to_string(),
            })
            .collect()),
        Value::Object(o) if o.is_empty() => Ok(Vec::new()),
        other => Err(serde::de::Error::custom(format!(
            "expected a list of strings, not {other}"
        ))),
    }
}

/// Every line of `entries`, in order, without their line ends.
fn lines(entries: &[String]) -> Vec<String> {
    entries
        .iter()
        .flat_map(|e| e.lines())
        .map(str::to_owned)
        .collect()
}

/// Trace `query` on the worker whose control socket is `socket` (named `worker` in the
/// result), within `limits`.
pub async fn run(
    socket: &Path,
    worker: &str,
    query: &TraceQuery,
    limits: TraceLimits,
) -> Result<Trace, TraceError> {
    let timeout = limits.timeout;
    if timeout.is_zero() || timeout > MAX_TIMEOUT {
        return Err(TraceError::InvalidTimeout);
    }
    let began = Instant::now();
    let deadline = began + timeout;
    let id = crate::manager::rundir::random_hex(8).map_err(|source| {
        TraceError::Control(ControlError::Io {
            path: "/dev/urandom".into(),
            source,
        })
    })?;
    let command = |expr: String| async move {
        let left = deadline.saturating_duration_since(Instant::now());
        control::command(socket, &expr, left.max(Duration::from_millis(1)))
            .await
            .map_err(|e| match e {
                ControlError::Timeout { .. } => TraceError::TimedOut(timeout),
                other => TraceError::Control(other),
            })
    };
    let started = match command(query.render_start(&id, limits.log_bytes)).await {
        Ok(answer) => answer,
        Err(e) => {
            // The worker may have started it all the same.
            forget(socket, &id).await;
            return Err(e);
        }
    };
    match &started {
        Value::Object(o) if o.get("started") == Some(&Value::Bool(true)) => {}
        Value::Object(o) if o.get("unknown_type") == Some(&Value::Bool(true)) => {
            return Err(TraceError::UnknownType(query.rr_type.to_owned()));
        }
        Value::Object(o) => match o.get("error") {
            Some(Value::String(e)) => return Err(TraceError::Refused(e.clone())),
            _ => return Err(TraceError::Unexpected(started)),
        },
        // kresd answers a Lua error as its text.
        Value::String(e) => return Err(TraceError::Refused(e.clone())),
        _ => return Err(TraceError::Unexpected(started)),
    }
    let mut pause = POLL_FIRST;
    let finished = loop {
        let answer = match command(render_poll(&id)).await {
            Ok(a) => a,
            Err(e) => {
                forget(socket, &id).await;
                return Err(e);
            }
        };
        if answer.get("done") == Some(&Value::Bool(true)) {
            break serde_json::from_value::<Finished>(answer.clone())
                .map_err(|_| TraceError::Unexpected(answer))?;
        }
        if answer.get("done") != Some(&Value::Bool(false)) {
            return Err(TraceError::Unexpected(answer));
        }
        let now = Instant::now();
        if now >= deadline {
            forget(socket, &id).await;
            return Err(TraceError::TimedOut(timeout));
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(POLL_MAX);
    };
    Ok(Trace {
        worker: worker.to_owned(),
        name: query.name.clone(),
        r#type: query.rr_type.to_owned(),
        rcode: finished.rcode,
        answer: lines(&finished.answer),
        log: lines(&finished.log),
        truncated: finished.truncated,
        elapsed_ms: u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX),
    })
}

/// Forget trace `id` in the worker: the caller stopped waiting for it. Bounded by
/// [`FORGET_TIMEOUT`], past the caller's deadline.
async fn forget(socket: &Path, id: &str) {
    if let Err(e) = control::command(socket, &render_forget(id), FORGET_TIMEOUT).await {
        tracing::warn!("cannot forget trace {id}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_types_are_validated_before_reaching_lua() {
        let q = TraceQuery::new("Example.COM.", "aaaa").expect("valid");
        assert_eq!((q.name(), q.rr_type()), ("Example.COM.", "AAAA"));
        let q = TraceQuery::new("příklad.cz", "A").expect("IDNA");
        assert_eq!(q.name(), "xn--pklad-zsa96e.cz");
        for name in ["a\nb.test", "]]..test", "-a.test", "a..b", ""] {
            assert!(
                matches!(
                    TraceQuery::new(name, "A"),
                    Err(TraceError::InvalidName { .. })
                ),
                "{name:?}"
            );
        }
        for rr_type in ["", "A'", "TYPE65534", "A]]"] {
            assert!(
                matches!(
                    TraceQuery::new("example.com", rr_type),
                    Err(TraceError::UnknownType(_))
                ),
                "{rr_type:?}"
            );
        }
    }

    #[test]
    fn quotes_and_brackets_are_names_as_upstream_reads_them_and_reach_lua_quoted() {
        for name in ["a'b.test", "a\\b.test", "x]] y", "a\"b"] {
            let q = TraceQuery::new(name, "A").expect("upstream's pattern allows it");
            assert_eq!(q.name(), name);
            let start = q.render_start("id", 1);
            assert!(
                start.contains(&format!("pcall(resolve, {}, ty", quote(name))),
                "{start}"
            );
        }
    }

    #[test]
    fn the_commands_are_one_line_with_every_value_quoted() {
        let q = TraceQuery::new("example.com", "MX").expect("valid");
        let start = q.render_start("00ff", 1024);
        assert!(!start.contains('\n'), "{start}");
        assert!(start.contains("kres.type['MX']"), "{start}");
        assert!(
            start.contains("pcall(resolve, 'example.com', ty"),
            "{start}"
        );
        assert!(start.contains("__kres_trace_runs['00ff'] = run"), "{start}");
        assert!(start.contains("run.size + #entry > 1024"), "{start}");
        assert!(!render_poll("00ff").contains('\n'));
        assert!(!render_forget("00ff").contains('\n'));
    }

    #[test]
    fn a_finished_trace_reads_with_empty_lua_lists() {
        let answer = serde_json::json!({"done": true, "rcode": "NXDOMAIN", "answer": {},
                                        "log": ["[plan  ] one\n[plan  ] two\n", "three\n"],
                                        "truncated": false});
        let f: Finished = serde_json::from_value(answer).expect("reads");
        assert_eq!(f.rcode.as_deref(), Some("NXDOMAIN"));
        assert!(f.answer.is_empty());
        assert_eq!(lines(&f.log), ["[plan  ] one", "[plan  ] two", "three"]);
    }
}
