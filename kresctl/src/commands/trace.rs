//! `kresctl trace NAME [TYPE]`: one query resolved by a worker with kresd's request tracing
//! (`GET /trace/{name}/{type}`), printed as its answer and kresd's log of it, or the API's
//! JSON. The name and type are checked here first, as the API checks them. kresd's log holds
//! bytes of the outside world (names, records from upstreams): every control character the
//! API relays is printed escaped, never to the terminal as it is.

use std::time::Duration;

use clap::{ArgAction, Args, ValueHint};

use crate::client::{ApiClient, ClientError};
use crate::flags::{flag, seconds_up_to};
use crate::output::{self, OutputFormat};
use crate::request::Request;
use kres_lua::trace::{TraceQuery, LOG_LIMIT, MAX_TIMEOUT};
use kres_wire::trace::Trace;

/// `kresctl trace`'s arguments.
#[derive(Args)]
pub struct TraceArgs {
    /// The domain name to resolve.
    #[arg(value_hint = ValueHint::Hostname)]
    pub name: String,
    /// The RR type to ask for (class IN).
    #[arg(default_value = "A", value_hint = ValueHint::Other)]
    pub rr_type: String,
    /// Seconds to wait for the answer (at most 60).
    #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = seconds_up_to(MAX_TIMEOUT),
          value_hint = ValueHint::Other)]
    pub timeout: Duration,
    /// Print the API's JSON instead.
    #[arg(id = "json", long = "json", action = ArgAction::SetTrue,
          value_parser = flag(OutputFormat::Json, OutputFormat::Text))]
    pub format: OutputFormat,
}

/// Trace the query and print it.
pub async fn run(client: &ApiClient, args: TraceArgs) -> Result<(), ClientError> {
    let query = TraceQuery::new(&args.name, &args.rr_type)
        .map_err(|e| ClientError::Invalid(e.to_string()))?;
    let request = Request::Trace {
        name: query.name(),
        rr_type: query.rr_type(),
        timeout: args.timeout,
    };
    let value = output::json_body(&client.call(&request).await?.ok()?)?;
    match args.format {
        OutputFormat::Json => print!(
            "{}",
            output::json_without_controls(&output::pretty_json(&value)?)
        ),
        OutputFormat::Yaml | OutputFormat::Text => {
            print!("{}", trace_text(&serde_json::from_value(value)?));
        }
    }
    Ok(())
}

/// What an operator reads of a trace; every text of the API's with its control characters
/// escaped.
fn trace_text(trace: &Trace) -> String {
    let shown = output::escape_controls;
    let rcode = trace.rcode.as_deref().unwrap_or("no answer (dropped)");
    let mut out = format!(
        "{} {} on {}: {} in {} ms\n",
        shown(&trace.name),
        shown(&trace.r#type),
        shown(&trace.worker),
        shown(rcode),
        trace.elapsed_ms
    );
    out.push_str("answer:\n");
    if trace.answer.is_empty() {
        out.push_str("  (none)\n");
    }
    for record in &trace.answer {
        out.push_str(&format!(
            "  {}\n",
            shown(&record.split_whitespace().collect::<Vec<_>>().join(" "))
        ));
    }
    out.push_str("log:\n");
    for line in &trace.log {
        out.push_str(&format!("  {}\n", shown(line)));
    }
    if trace.truncated {
        out.push_str(&format!(
            "(the log was cut at {} KiB; later lines are missing)\n",
            LOG_LIMIT / 1024
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_reads_as_its_answer_then_its_log() {
        let trace = Trace {
            worker: "kresd0".into(),
            name: "www.example.".into(),
            r#type: "A".into(),
            rcode: Some("NOERROR".into()),
            answer: vec!["www.example.   \t300\tA\t192.0.2.1".into()],
            log: vec!["[resolv][00001.01] querying".into()],
            truncated: true,
            elapsed_ms: 3,
        };
        assert_eq!(
            trace_text(&trace),
            "www.example. A on kresd0: NOERROR in 3 ms\n\
             answer:\n  www.example. 300 A 192.0.2.1\n\
             log:\n  [resolv][00001.01] querying\n\
             (the log was cut at 256 KiB; later lines are missing)\n"
        );
        let dropped = Trace {
            rcode: None,
            answer: Vec::new(),
            log: Vec::new(),
            truncated: false,
            ..trace
        };
        assert_eq!(
            trace_text(&dropped),
            "www.example. A on kresd0: no answer (dropped) in 3 ms\nanswer:\n  (none)\nlog:\n"
        );
    }

    #[test]
    fn what_kresd_logged_reaches_the_terminal_escaped() {
        let trace = Trace {
            worker: "kresd0".into(),
            name: "evil\u{1b}[2J.example.".into(),
            r#type: "TXT".into(),
            rcode: Some("NOERROR".into()),
            answer: vec!["evil.example. 300 TXT \"\u{1b}]0;owned\u{7}\"".into()],
            log: vec!["[resolv][00001.01] \u{1b}[31mred\r\n[fake] line \u{9b}31m\tend".into()],
            truncated: false,
            elapsed_ms: 1,
        };
        let text = trace_text(&trace);
        assert_eq!(
            text,
            "evil\\x1b[2J.example. TXT on kresd0: NOERROR in 1 ms\n\
             answer:\n  evil.example. 300 TXT \"\\x1b]0;owned\\x07\"\n\
             log:\n  [resolv][00001.01] \\x1b[31mred\\x0d\\x0a[fake] line \\u{9b}31m\tend\n"
        );
        assert!(
            !text
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t'),
            "{text:?}"
        );
    }
}
