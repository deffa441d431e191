//! `kresctl pids` and `kresctl processes`: the supervised processes, as PIDs, as a table or
//! as the API's JSON. Process entries are read in one place, as `wire::processes::ProcessEntry`,
//! by `process_row` (and leniently by `pid` for `pids`, which upstream's manager answers too).

use std::time::SystemTime;

use kres_wire::processes::ExitStatus;
use serde_json::Value;

use crate::client::{ApiClient, ClientError};
use crate::output::{self, OutputFormat};
use crate::request::Request;
use kres_wire::processes::ProcessEntry;

/// `kresctl pids`: one PID a line, or the full entries as JSON.
pub async fn pids(client: &ApiClient, kind: &str, format: OutputFormat) -> Result<(), ClientError> {
    let body = client.call(&Request::ProcessesOf { kind }).await?.ok()?;
    let value: Value = serde_json::from_slice(&body)?;
    match format {
        OutputFormat::Json => output::print(&output::pretty_json(&value)?)?,
        OutputFormat::Yaml | OutputFormat::Text => {
            for pid in value.as_array().into_iter().flatten().filter_map(pid) {
                output::println(&pid.to_string())?;
            }
        }
    }
    Ok(())
}

/// `kresctl processes`: the process table, as a table or JSON.
pub async fn print_processes(client: &ApiClient, format: OutputFormat) -> Result<(), ClientError> {
    let value = output::json_body(&client.call(&Request::Processes).await?.ok()?)?;
    match format {
        OutputFormat::Json => output::print(&output::pretty_json(&value)?)?,
        OutputFormat::Yaml | OutputFormat::Text => {
            let entries: Vec<ProcessEntry> = serde_json::from_value(value)?;
            output::print(&processes_table(&entries, SystemTime::now()))?;
        }
    }
    Ok(())
}

/// The PID of an entry of `GET /pids/{kind}`, read leniently: upstream's manager answers
/// that route too.
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
    restarts: u32,
    /// How it last ended (`exit 1`, `signal 9`), and why it was killed.
    last_exit: String,
}

/// The one place a process entry of the API is read for the table.
fn process_row(entry: &ProcessEntry, now: SystemTime) -> ProcessRow {
    let age = |t: Option<SystemTime>| -> String {
        match t.and_then(|t| now.duration_since(t).ok()) {
            Some(d) => {
                let s = d.as_secs();
                format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
            }
            None => "-".to_owned(),
        }
    };
    let process = &entry.process;
    let last_exit = match process.last_exit {
        Some(ExitStatus::Code(code)) => format!("exit {code}"),
        Some(ExitStatus::Signaled { signal, .. }) => format!("signal {signal}"),
        None => "-".into(),
    };
    ProcessRow {
        name: process.name.clone(),
        kind: process.kind.clone(),
        pid: process.pid.map_or_else(|| "-".into(), |x| x.to_string()),
        state: process.state.as_str().to_owned(),
        uptime: age(process.since),
        ready_since: age(process.ready_at),
        restarts: process.restarts,
        last_exit: match &process.kill_reason {
            Some(reason) => format!("{last_exit} ({reason})"),
            None => last_exit,
        },
    }
}

/// The process table as an operator reads it: like `supervisorctl status`, plus readiness,
/// restarts and the last exit.
fn processes_table(entries: &[ProcessEntry], now: SystemTime) -> String {
    let mut out = format!(
        "{:<16} {:<14} {:>8} {:<9} {:>10} {:>12} {:>8}  {}\n",
        "NAME", "KIND", "PID", "STATE", "UPTIME", "READY-SINCE", "RESTARTS", "LAST EXIT"
    );
    for entry in entries {
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
    use std::time::Duration;

    #[test]
    fn the_table_reads_every_field_of_the_entries_served() {
        let entries: Vec<ProcessEntry> = serde_json::from_value(json!([
            {"name": "kresd1", "kind": "kresd", "pid": 4242, "state": "running",
             "since": 1000.0, "ready_at": 3000.5, "restarts": 2,
             "last_exit": {"signaled": {"signal": 9, "core_dumped": false}},
             "failure": null, "status_text": null, "kill_reason": "hung",
             "type": "KRESD", "status": "RUNNING"},
            {"name": "cache-gc", "kind": "gc", "pid": null, "state": "backoff",
             "since": 9000.0, "ready_at": null, "restarts": 0, "last_exit": {"code": 1},
             "failure": null, "status_text": null, "type": "GC", "status": "EXITED"},
        ]))
        .expect("entries as served");
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(4661);
        let table = processes_table(&entries, now);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines,
            [
                "NAME             KIND                PID STATE         UPTIME  READY-SINCE RESTARTS  LAST EXIT",
                "kresd1           kresd              4242 running      1:01:01      0:27:40        2  signal 9 (hung)",
                "cache-gc         gc                    - backoff            -            -        0  exit 1",
            ]
        );
    }

    #[test]
    fn pids_are_read_from_any_entry_with_one() {
        let entries = json!([{"pid": 4242}, {"name": "cache-gc"}, {"pid": "x"}]);
        let pids: Vec<i64> = entries
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(pid)
            .collect();
        assert_eq!(pids, [4242]);
    }
}
