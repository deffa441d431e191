//! `kresctl config get|set|delete|diff`: read or change the running configuration at a JSON
//! pointer (`diff` is in [`super::diff`]).

use std::path::Path;

use crate::kresctl::cli::ConfigOp;
use crate::kresctl::client::{ApiClient, ClientError};
use crate::kresctl::output::{self, OutputFormat};
use crate::kresctl::request::Request;

/// Run one `config` subcommand.
pub async fn run(client: &ApiClient, op: ConfigOp) -> Result<(), ClientError> {
    match op {
        ConfigOp::Get {
            path, format, file, ..
        } => get(client, &path, format, file.as_deref()).await,
        ConfigOp::Set {
            path,
            value_or_file,
        } => set(client, &path, value_or_file).await,
        ConfigOp::Delete { path } => {
            let request = Request::DeleteConfig { pointer: &path };
            client.call(&request).await?.ok()?;
            Ok(())
        }
        ConfigOp::Diff { format, input_file } => {
            super::diff::diff(client, &input_file, format).await
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

/// `config set`: the value is given, or a file holding it, or typed on standard input.
async fn set(
    client: &ApiClient,
    pointer: &str,
    value_or_file: Option<String>,
) -> Result<(), ClientError> {
    let text = match value_or_file {
        Some(v) if Path::new(&v).is_file() => std::fs::read_to_string(&v)?,
        Some(v) => v,
        None => {
            use std::io::BufRead;
            eprint!("Type new configuration: ");
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line)?;
            line
        }
    };
    let value = crate::config::parse_document(&text, Path::new("value.yaml"))
        .map_err(|e| ClientError::Invalid(e.to_string()))?;
    let request = Request::SetConfig {
        pointer,
        value: &value,
    };
    let body = client.call(&request).await?.ok()?;
    if !body.is_empty() {
        output::println(&String::from_utf8_lossy(&body))?;
    }
    Ok(())
}
