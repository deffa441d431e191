//! `kresctl config get|set|delete|patch|diff`: read or change the running configuration at a
//! JSON pointer (`diff` is in [`super::diff`]). Every change prints the one line the resolver
//! answers about it (what changed, which workers restarted or only reset their rules), and
//! may be only tried (`--dry-run`, the API's `?dry-run=true`).
//!
//! A value is read whole: from the argument, from the file it names, or from standard input
//! (a prompt only when that is a terminal). It is JSON, else YAML, as upstream's kresctl reads
//! it, except that a text of several lines that YAML would fold into one (a zone's records)
//! is taken as it is.

use std::io::{IsTerminal, Read};
use std::path::Path;

use serde_json::Value;

use crate::cli::ConfigOp;
use crate::client::{ApiClient, ApiResponse, ClientError};
use crate::output::{self, OutputFormat};
use crate::request::{rooted, Request, Run, Stage};
use kres_config::document_diff::{differences, Difference};

/// Run one `config` subcommand.
pub async fn run(client: &ApiClient, op: ConfigOp) -> Result<(), ClientError> {
    match op {
        ConfigOp::Get {
            path,
            format,
            file,
            explain,
            ..
        } => {
            if explain {
                super::fleet::explain(client).await?;
            }
            get(client, &path, format, file.as_deref()).await
        }
        ConfigOp::Set {
            path,
            value_or_file,
            run,
            stage,
        } => {
            let value = parse_value(&input_text(value_or_file.as_deref())?)?;
            set(client, &path, &value, run, stage.of()).await
        }
        ConfigOp::Delete { path, run, stage } => {
            refuse_dry_run_without_support(client, run).await?;
            let response = client
                .call(&Request::DeleteConfig {
                    pointer: &path,
                    run,
                    stage: stage.of(),
                })
                .await?;
            super::outcome::print_outcome(&response.ok()?, run)
        }
        ConfigOp::Patch {
            operations_or_file,
            run,
            stage,
        } => {
            let operations = parse_value(&input_text(operations_or_file.as_deref())?)?;
            if !operations.is_array() {
                return Err(ClientError::Invalid(
                    "a JSON Patch is a list of operations ([{\"op\": \"replace\", \"path\": \
                     \"/workers\", \"value\": 2}])"
                        .into(),
                ));
            }
            refuse_dry_run_without_support(client, run).await?;
            let request = Request::PatchConfig {
                operations: &operations,
                run,
                stage: stage.of(),
            };
            super::outcome::print_outcome(&client.call(&request).await?.ok()?, run)
        }
        // As diff(1): exit 1 when there are differences.
        ConfigOp::Diff { format, input_file } => {
            match super::diff::diff(client, &input_file, format).await? {
                super::diff::Compared::Same => Ok(()),
                super::diff::Compared::Different => Err(ClientError::Differences),
            }
        }
    }
}

/// `config get`: the configuration at `pointer`, printed or written to `file`.
async fn get(
    client: &ApiClient,
    pointer: &str,
    format: OutputFormat,
    file: Option<&Path>,
) -> Result<(), ClientError> {
    let body = client.call(&Request::GetConfig { pointer }).await?.ok()?;
    output::emit(&output::document(&output::json_body(&body)?, format)?, file)
}

/// The text of a value: the argument, the file it names, or standard input read whole.
fn input_text(value_or_file: Option<&str>) -> Result<String, ClientError> {
    match value_or_file {
        Some(v) if Path::new(v).is_file() => {
            std::fs::read_to_string(v).map_err(|e| ClientError::Invalid(format!("{v}: {e}")))
        }
        Some(v) => Ok(v.to_owned()),
        None => {
            let mut stdin = std::io::stdin().lock();
            if stdin.is_terminal() {
                eprintln!("Type the new value (JSON or YAML), then Ctrl-D:");
            }
            let mut text = String::new();
            stdin
                .read_to_string(&mut text)
                .map_err(|e| ClientError::Invalid(format!("standard input: {e}")))?;
            Ok(text)
        }
    }
}

/// A value as kresctl reads it: JSON, else YAML; a text of several lines that YAML would fold
/// into one line (or cannot read, as a zone's `@` owner) is a string as it is.
pub fn parse_value(text: &str) -> Result<Value, ClientError> {
    if text.trim().is_empty() {
        return Err(ClientError::Invalid("no value given".into()));
    }
    match kres_config::parse_document(text, Path::new("value.yaml")) {
        Ok(Value::String(_)) if is_plain_lines(text) => Ok(Value::String(text.to_owned())),
        Ok(value) => Ok(value),
        Err(_) if is_plain_lines(text) => Ok(Value::String(text.to_owned())),
        Err(e) => Err(ClientError::Invalid(e.to_string())),
    }
}

/// Whether `text` has several lines and is no quoted or block YAML scalar (which YAML reads
/// as the writer meant).
fn is_plain_lines(text: &str) -> bool {
    let several = text.trim_end_matches('\n').contains('\n');
    let quoted = text
        .trim_start()
        .starts_with(['|', '>', '"', '\'', '{', '[']);
    several && !quoted
}

/// `config set`. Replacing an object says what of it is gone: the members it had that the new
/// value lacks (upstream replaces silently; a section set whole loses what it does not
/// repeat).
async fn set(
    client: &ApiClient,
    pointer: &str,
    value: &Value,
    run: Run,
    stage: Stage<'_>,
) -> Result<(), ClientError> {
    let pointer: &str = &rooted(pointer);
    refuse_dry_run_without_support(client, run).await?;
    let removed = if value.is_object() {
        removed_members(client, pointer, value).await?
    } else {
        Vec::new()
    };
    let request = Request::SetConfig {
        pointer,
        value,
        run,
        stage,
    };
    let body = client.call(&request).await?.ok()?;
    super::outcome::print_outcome(&body, run)?;
    if !removed.is_empty() {
        let paths: Vec<&str> = removed.iter().map(|d| d.path()).collect();
        let verb = match run {
            Run::ForReal => "removed",
            Run::DryRun => "would remove",
        };
        eprintln!(
            "replacing {} whole {verb}: {}",
            if pointer.is_empty() { "/" } else { pointer },
            paths.join(", ")
        );
    }
    Ok(())
}

/// The members of the object at `pointer` that `value` lacks (nothing when there is no
/// object there yet, or the server does not say: upstream's manager answers an error for a
/// pointer to nothing).
async fn removed_members(
    client: &ApiClient,
    pointer: &str,
    value: &Value,
) -> Result<Vec<Difference>, ClientError> {
    let response: ApiResponse = client.call(&Request::GetConfig { pointer }).await?;
    let current = match response.ok() {
        Ok(body) => serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null),
        Err(_) => return Ok(Vec::new()),
    };
    let mut removed = differences(&current, value);
    removed.retain(|d| matches!(d, Difference::Remove { .. }));
    for d in &mut removed {
        d.prefix(pointer);
    }
    Ok(removed)
}

/// A dry run asked of a server that would apply it (upstream's manager ignores
/// `?dry-run=true`) is refused before anything is sent.
async fn refuse_dry_run_without_support(client: &ApiClient, run: Run) -> Result<(), ClientError> {
    if run == Run::DryRun && !super::diff::offers_dry_run(client).await? {
        return Err(ClientError::NotOffered(
            "the resolver's management API offers no dry run (it is upstream's manager or an \
             older knot-resolver); nothing was sent"
                .into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn values_are_json_then_yaml_and_lines_stay_lines() {
        let records = "a.test. 300 A 192.0.2.1\nb.test. 300 A 192.0.2.2\nc.test. 300 A 192.0.2.3\n";
        let rows: Vec<(&str, Value)> = vec![
            ("2", json!(2)),
            ("100M", json!("100M")),
            ("\"100M\"", json!("100M")),
            ("true", json!(true)),
            (
                "{\"a.test\": \"192.0.2.1\"}",
                json!({"a.test": "192.0.2.1"}),
            ),
            (
                "addresses:\n  a.test: 192.0.2.1\n",
                json!({"addresses": {"a.test": "192.0.2.1"}}),
            ),
            ("- 1\n- 2\n", json!([1, 2])),
            // A zone text: kept line by line (YAML would fold it into one line).
            (records, json!(records)),
            (
                "a.test. 300 A 192.0.2.1\n",
                json!("a.test. 300 A 192.0.2.1"),
            ),
            // An owner YAML cannot read.
            (
                "@ 300 A 192.0.2.1\nb 300 A 192.0.2.2",
                json!("@ 300 A 192.0.2.1\nb 300 A 192.0.2.2"),
            ),
            // What `config get` prints of a text: a YAML block, read back to the same text.
            (
                "|\n  a.test. 300 A 192.0.2.1\n  b.test. 300 A 192.0.2.2\n",
                json!("a.test. 300 A 192.0.2.1\nb.test. 300 A 192.0.2.2\n"),
            ),
            ("\"a\\nb\"", json!("a\nb")),
        ];
        for (text, want) in rows {
            assert_eq!(parse_value(text).ok(), Some(want), "{text:?}");
        }
        for nothing in ["", " \n"] {
            assert!(parse_value(nothing).is_err(), "{nothing:?}");
        }
        assert!(parse_value("{unclosed").is_err());
    }
}
