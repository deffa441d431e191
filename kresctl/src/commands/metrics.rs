//! `kresctl metrics`: the workers' metrics, as pretty JSON or as the Prometheus text
//! exposition (upstream's command), or as a summary of two scrapes for a person at a
//! terminal (`--summary`, ours).

mod summary;

use std::path::Path;
use std::time::{Duration, Instant};

use crate::client::{ApiClient, ClientError};
use crate::output;
use crate::request::{MetricsFormat, Request};
use summary::{Scrape, Summary};

pub async fn metrics(
    client: &ApiClient,
    format: MetricsFormat,
    file: Option<&Path>,
) -> Result<(), ClientError> {
    let body = fetch(client, format).await?;
    let text = match format {
        MetricsFormat::Prometheus => String::from_utf8_lossy(&body).into_owned(),
        MetricsFormat::Json => output::pretty_json(&serde_json::from_slice(&body)?)?,
    };
    output::emit(&text, file)
}

/// The body of `GET /metrics/json` or `/metrics/prometheus`; upstream's words when the
/// resolver offers no Prometheus text.
async fn fetch(client: &ApiClient, format: MetricsFormat) -> Result<Vec<u8>, ClientError> {
    let response = client.call(&Request::Metrics(format)).await?;
    if format == MetricsFormat::Prometheus && response.status == 404 {
        return Err(ClientError::Status {
            status: 404,
            body: "Prometheus is unavailable due to missing optional dependencies".to_owned(),
        });
    }
    response.ok()
}

/// One scrape of the Prometheus text, and when its answer came.
async fn scrape(client: &ApiClient) -> Result<(Scrape, Instant), ClientError> {
    let body = fetch(client, MetricsFormat::Prometheus).await?;
    let at = Instant::now();
    let text = String::from_utf8_lossy(&body);
    let scrape = Scrape::parse(&text)
        .map_err(|e| ClientError::Failed(format!("unreadable metrics from the resolver: {e}")))?;
    Ok((scrape, at))
}

/// `kresctl metrics --summary`: two scrapes `interval` apart, and what happened between
/// them, with at most `top` rows per table.
pub async fn summary(
    client: &ApiClient,
    interval: Duration,
    top: usize,
) -> Result<(), ClientError> {
    let (before, began) = scrape(client).await?;
    tokio::time::sleep(interval).await;
    let (after, ended) = scrape(client).await?;
    let seconds = ended.duration_since(began).as_secs_f64();
    output::print(&Summary::between(&before, &after, seconds).render(top))?;
    Ok(())
}
