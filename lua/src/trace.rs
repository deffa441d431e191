//! The commands that trace one query in a worker (`knot_resolver::trace` sends them): the
//! validated question, and the Lua that starts the resolution with kresd's request tracing,
//! polls its table entry and forgets it.

use std::time::Duration;

use kres_config::types::DomainName;

use crate::cache_clear::RR_TYPES;
use crate::quote;

/// The longest timeout a caller may ask for.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);

/// The most log a trace collects, in bytes; entries past it are dropped and the trace says
/// it was truncated.
pub const LOG_LIMIT: usize = 256 * 1024;

/// The worker's global table of traces in progress, by trace id.
pub const RUNS: &str = "__kres_trace_runs";

/// Why a question cannot be traced.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("'{name}' is not a domain name: {reason}")]
    InvalidName {
        name: String,
        reason: kres_config::types::TypeError,
    },
    #[error("'{0}' is not a known RR type")]
    UnknownType(String),
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
    pub fn new(name: &str, rr_type: &str) -> Result<TraceQuery, QueryError> {
        let parsed = DomainName::parse(name).map_err(|reason| QueryError::InvalidName {
            name: name.to_owned(),
            reason,
        })?;
        let rr_type = RR_TYPES
            .iter()
            .find(|t| t.eq_ignore_ascii_case(rr_type))
            .ok_or_else(|| QueryError::UnknownType(rr_type.to_owned()))?;
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
pub fn render_poll(id: &str) -> String {
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
pub fn render_forget(id: &str) -> String {
    let id = quote(id);
    format!("(function() if {RUNS} then {RUNS}[{id}] = nil end return true end)()")
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
                    Err(QueryError::InvalidName { .. })
                ),
                "{name:?}"
            );
        }
        for rr_type in ["", "A'", "TYPE65534", "A]]"] {
            assert!(
                matches!(
                    TraceQuery::new("example.com", rr_type),
                    Err(QueryError::UnknownType(_))
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
}
