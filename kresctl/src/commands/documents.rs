//! `kresctl schema` and `kresctl openapi`: the configuration's JSON schema and the API's
//! OpenAPI description, from kresctl's own copy or as the running resolver serves them.

use std::path::Path;

use crate::client::{ApiClient, ClientError};
use crate::output;
use crate::request::Request;

/// A document kresctl carries a copy of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Document {
    /// The configuration's JSON schema.
    Schema,
    /// The management API's OpenAPI description.
    OpenApi,
}

/// `schema` and `openapi --local`: kresctl's own copy, printed or written to `file`.
pub fn local(document: Document, file: Option<&Path>) -> Result<(), ClientError> {
    let text = match document {
        Document::Schema => format!(
            "{}\n",
            serde_json::to_string_pretty(&kres_config::json_schema()).unwrap_or_default()
        ),
        Document::OpenApi => kres_wire::OPENAPI_DOCUMENT.to_owned(),
    };
    output::emit(&text, file)
}

/// `schema --live`: the resolver's schema, as it sends it.
pub async fn live_schema(client: &ApiClient, file: Option<&Path>) -> Result<(), ClientError> {
    let body = client.call(&Request::Schema).await?.ok()?;
    output::emit(&String::from_utf8_lossy(&body), file)
}

/// `openapi`: the resolver's description, newline-terminated; a server without one says so.
pub async fn live_openapi(client: &ApiClient, file: Option<&Path>) -> Result<(), ClientError> {
    let response = client.call(&Request::OpenApi).await?;
    if response.status == 404 {
        return Err(ClientError::NotOffered(
            "the server does not offer an OpenAPI description (no /openapi.json route: \
             upstream's manager or an older knot-resolver); `kresctl openapi --local` \
             prints this kresctl's"
                .into(),
        ));
    }
    let mut text = String::from_utf8_lossy(&response.ok()?).into_owned();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    output::emit(&text, file)
}
