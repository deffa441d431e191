//! `kresctl cache clear`: purge cache records, checked locally first like upstream, so a bad
//! request never reaches the resolver.

use serde_json::{Map, Value};

use crate::cli::CacheOp;
use crate::client::{ApiClient, ClientError};
use crate::output::{self, OutputFormat};
use crate::request::Request;

/// Run one `cache` subcommand.
pub async fn run(client: &ApiClient, op: CacheOp) -> Result<(), ClientError> {
    match op {
        CacheOp::Clear {
            exact_name,
            rr_type,
            chunk_size,
            name,
            format,
            yaml: _,
        } => {
            let mut body = Map::new();
            if let Some(name) = name {
                body.insert("name".into(), Value::String(name));
            }
            body.insert("exact-name".into(), Value::Bool(exact_name));
            if let Some(t) = rr_type {
                body.insert("rr-type".into(), Value::String(t));
            }
            body.insert("chunk-size".into(), Value::from(chunk_size));
            clear(client, &Value::Object(body), format).await
        }
    }
}

/// `cache clear`: send `body` if it is a valid request, print the answer.
async fn clear(client: &ApiClient, body: &Value, format: OutputFormat) -> Result<(), ClientError> {
    if let Err(errors) = kres_lua::cache_clear::CacheClear::from_json(body) {
        return Err(ClientError::Invalid(errors.join("\n")));
    }
    let response = client.call(&Request::CacheClear { body }).await?.ok()?;
    output::print(&output::document(&output::json_body(&response)?, format)?)?;
    Ok(())
}
