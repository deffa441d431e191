//! `kresctl metrics`: the workers' metrics, as pretty JSON or as the Prometheus text
//! exposition.

use std::path::Path;

use crate::kresctl::client::{ApiClient, ClientError};
use crate::kresctl::output;
use crate::kresctl::request::{MetricsFormat, Request};

pub async fn metrics(
    client: &ApiClient,
    format: MetricsFormat,
    file: Option<&Path>,
) -> Result<(), ClientError> {
    let response = client.call(&Request::Metrics(format)).await?;
    if format == MetricsFormat::Prometheus && response.status == 404 {
        return Err(ClientError::Status {
            status: 404,
            body: "Prometheus is unavailable due to missing optional dependencies".to_owned(),
        });
    }
    let body = response.ok()?;
    let text = match format {
        MetricsFormat::Prometheus => String::from_utf8_lossy(&body).into_owned(),
        MetricsFormat::Json => output::pretty_json(&serde_json::from_slice(&body)?)?,
    };
    output::emit(&text, file)
}
