//! `kresctl pids` and `kresctl processes`: the supervised processes, as PIDs, as a table or
//! as the API's JSON. Process entries are read in one place, `process_row` (and `pid`
//! for `pids`).

use serde_json::Value;

use crate::kresctl::client::{ApiClient, ClientError};
use crate::kresctl::output::{self, OutputFormat};
use crate::kresctl::request::Request;

/// `kresctl pids`: one PID a line, or the full entries as JSON.
pub async fn pids(client: &ApiClient, kind: &str, format: OutputFormat) -> Result<(), ClientError> {
    let body = client.call(&Request::ProcessesOf { kind }).await?.ok()?;
    let value: Value = serde_json::from_slice(&body)?;
    match format {
        OutputFormat::Json => print!("{}", output::pretty_json(&value)?),
        OutputFormat::Yaml | OutputFormat::Text => {
            for pid in value.as_array().into_iter().flatten().filter_map(pid) {
                println!("{pid}");
            }
        }
    }
    Ok(())
}

/// `kresctl processes`: the process table, as a table or JSON.
pub async fn print_processes(client: &ApiClient, format: OutputFormat) -> Result<(), ClientError> {
    let value = output::json_body(&client.call(&Request::Processes).await?.ok()?)?;
    match format {
        OutputFormat::Json => print!("{}", output::pretty_json(&value)?),
        OutputFormat::Yaml | OutputFormat::Text => print!("{}", processes_table(&value, now())),
    }
    Ok(())
}

/// Seconds since the epoch.
fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The PID of a process entry, if it has one.
fn pid(entry: &Value) -> Option<i64> {
    entry.get("pid").and_then(Value::as_i64)
}

/// One row of the table: what an operator reads of a process entry at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ProcessRow {
    name: String,
    kind: String,
    pid: String,
    state: String,
    /// Since it entered its state, `H:MM:SS`.
    uptime: String,
    /// Since it became ready, `H:MM:SS`.
    ready_since: String,
    restarts: u64,
    /// How it last ended (`exit 1`, `signal 9`), and why it was killed.
    last_exit: String,
}

/// The one place a process entry of the API is read for the table.
fn process_row(entry: &Value, now: f64) -> ProcessRow {
    let age = |v: Option<&Value>| -> String {
        match v.and_then(Value::as_f64) {
            Some(t) if now >= t => {
                let s = (now - t) as u64;
                format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
            }
            _ => "-".to_owned(),
        }
    };
    let text = |k: &str| {
        entry
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("-")
            .to_owned()
    };
    let last_exit = match entry.get("last_exit") {
        Some(Value::Object(m)) => {
            if let Some(code) = m.get("code") {
                format!("exit {code}")
            } else if let Some(sig) = m.get("signaled").and_then(|v| v.get("signal")) {
                format!("signal {sig}")
            } else {
                "-".into()
            }
        }
        _ => "-".into(),
    };
    ProcessRow {
        name: text("name"),
        kind: text("kind"),
        pid: pid(entry).map_or_else(|| "-".into(), |x| x.to_string()),
        state: text("state"),
        uptime: age(entry.get("since")),
        ready_since: age(entry.get("ready_at")),
        restarts: entry.get("restarts").and_then(Value::as_u64).unwrap_or(0),
        last_exit: match entry.get("kill_reason").and_then(Value::as_str) {
            Some(reason) => format!("{last_exit} ({reason})"),
            None => last_exit,
        },
    }
}

/// The process table as an operator reads it: like `supervisorctl status`, plus readiness,
/// restarts and the last exit.
fn processes_table(value: &Value, now: f64) -> String {
    let mut out = format!(
        "{:<16} {:<14} {:>8} {:<9} {:>10} {:>12} {:>8}  {}\n",
        "NAME", "KIND", "PID", "STATE", "UPTIME", "READY-SINCE", "RESTARTS", "LAST EXIT"
    );
    for entry in value.as_array().into_iter().flatten() {
        let row = process_row(entry, now);
        out.push_str(&format!(
            "{:<16} {:<14} {:>8} {:<9} {:>10} {:>12} {:>8}  {}\n",
            row.name,
            row.kind,
            row.pid,
            row.state,
            row.uptime,
            row.ready_since,
            row.restarts,
            row.last_exit
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_table_reads_every_field_and_tolerates_missing_ones() {
        let entries = json!([
            {"name": "kresd1", "kind": "kresd", "pid": 4242, "state": "running",
             "since": 1000.0, "ready_at": 3000.5, "restarts": 2,
             "last_exit": {"signaled": {"signal": 9}}, "kill_reason": "hung"},
            {"name": "cache-gc", "kind": "gc", "state": "backoff",
             "last_exit": {"code": 1}, "since": 9000.0},
            {}
        ]);
        let table = processes_table(&entries, 4661.0);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines,
            [
                "NAME             KIND                PID STATE         UPTIME  READY-SINCE RESTARTS  LAST EXIT",
                "kresd1           kresd              4242 running      1:01:01      0:27:40        2  signal 9 (hung)",
                "cache-gc         gc                    - backoff            -            -        0  exit 1",
                "-                -                     - -                  -            -        0  -",
            ]
        );
        let pids: Vec<i64> = entries
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(pid)
            .collect();
        assert_eq!(pids, [4242]);
    }
}
