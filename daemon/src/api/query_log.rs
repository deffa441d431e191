//! `GET /query-log` (the newest answers, filtered), `GET /query-log/stream` (answers as they
//! come, as server-sent events), `GET /query-log/status` (the ring, what it received and
//! missed) and `GET /top/{kind}` (the most frequent clients, names, failing names, types).
//! All only read the ring (`crate::query_log`), from a snapshot of shared entries taken under
//! its lock and worked on without it (off the runtime's threads: `manager::off_thread`). The
//! lists and the stream show client addresses and single queries: the admin's only
//! (`api::roles`); the status and the top lists but `clients` are the read-only role's too. A
//! list is capped in bytes and only a few are made or sent at once (`api::heavy`).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::time::{Duration, SystemTime};

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{header, Method, StatusCode};
use axum::response::sse::{self, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::Stream;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::OwnedSemaphorePermit;

use super::error::ApiError;
use super::heavy::ANSWER_CAP;
use super::params::{PathParam, PathValue};
use super::{json_value, ApiState};
use crate::query_log::select::{self, Filter, TopKind};
use crate::query_log::Entry;
use kres_wire::query_log::{LoggedAnswer, QueryLogStatus, TopList};

/// Answers `GET /query-log` gives at most.
const MAX_LIMIT: usize = 100_000;
/// Live followers at once.
const MAX_FOLLOWERS: usize = 16;

/// Which answers: every parameter optional.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogQuery {
    /// Clients in this network (`192.0.2.0/24`) or with this address.
    client: Option<String>,
    /// Names at or below this one (whole labels).
    name: Option<String>,
    /// Of this type (`AAAA`, `TYPE65`, `28`).
    qtype: Option<String>,
    /// With this rcode (`SERVFAIL`, `NXDOMAIN`, `2`).
    rcode: Option<String>,
    /// The newest this many (default 100, at most 100,000).
    limit: Option<usize>,
}

impl LogQuery {
    fn filter(&self) -> Result<Filter, ApiError> {
        Filter::parse(
            self.client.as_deref(),
            self.name.as_deref(),
            self.qtype.as_deref(),
            self.rcode.as_deref(),
        )
        .map_err(|e| ApiError::BadRequest(e.to_string()))
    }
}

/// The newest answers of the query log that pass the filters, oldest first.
#[utoipa::path(
    get,
    path = "/query-log",
    tag = "query log",
    params(LogQuery),
    responses(
        (status = 200, description = "The answers, oldest first (none: `[]`), as compact JSON \
of at most 8 MiB: when the answers asked for do not fit, the newest that do, and \
`Query-Log-Truncated` says how many older ones were left out. A `HEAD` makes no list.",
         body = Vec<LoggedAnswer>,
         headers(("Query-Log-Truncated" = u64, description = "Answers left out (older than \
those sent) to keep the list within 8 MiB; absent when none were."))),
        (status = 400, description = "A filter that does not parse, named.", body = String, content_type = "text/plain"),
        (status = 429, description = "As many lists of the query log as may be made or sent at \
once (4) are; `Retry-After` says when to try again.", body = String, content_type = "text/plain",
         headers(("Retry-After" = u32, description = "Seconds to wait."))),
    ),
)]
pub(super) async fn query_log_entries(
    State(state): State<ApiState>,
    method: Method,
    Query(query): Query<LogQuery>,
) -> Result<Response, ApiError> {
    let filter = query.filter()?;
    let limit = query.limit.unwrap_or(100).min(MAX_LIMIT);
    if method == Method::HEAD {
        // The status and type a GET would have; the list, which may be megabytes, is not
        // made for a body nobody is sent.
        return Ok((StatusCode::OK, [(header::CONTENT_TYPE, JSON)]).into_response());
    }
    // Held by the body until it is sent or the connection is cut.
    let place = state.heavy.query_log()?;
    let entries = state.query_log.newest(&filter, limit);
    let (list, left_out) =
        crate::manager::off_thread(move || capped_list(&entries, ANSWER_CAP)).await;
    let mut response = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, JSON)],
        Body::from_stream(chunks_holding(list.into(), place)),
    )
        .into_response();
    if left_out > 0 {
        response
            .headers_mut()
            .insert(TRUNCATED, header::HeaderValue::from(left_out));
    }
    Ok(response)
}

/// The header that says how many answers a list left out.
pub const TRUNCATED: &str = "query-log-truncated";

/// The content type of the lists.
const JSON: &str = "application/json";

/// The pieces a list is handed to the connection in: the connection takes the next only when
/// it has written most of the last.
const CHUNK: usize = 64 << 10;

/// The JSON array of `entries` (oldest first), compact, of at most `cap` bytes: when they do
/// not all fit, the newest that do; and how many older ones were left out. Each entry is
/// written twice (once to measure, newest first, once in place) so that the list is never
/// held twice in memory.
fn capped_list(entries: &[Entry], cap: usize) -> (Vec<u8>, usize) {
    let mut scratch = Vec::new();
    let mut size = 2;
    let mut fitting = 0;
    for entry in entries.iter().rev() {
        scratch.clear();
        if serde_json::to_writer(&mut scratch, &entry.to_wire()).is_err() {
            continue;
        }
        let more = scratch.len() + usize::from(fitting > 0);
        if size + more > cap {
            break;
        }
        size += more;
        fitting += 1;
    }
    let kept = &entries[entries.len() - fitting..];
    let mut list = Vec::with_capacity(size);
    list.push(b'[');
    for (i, entry) in kept.iter().enumerate() {
        if i > 0 {
            list.push(b',');
        }
        // Measured above: it cannot fail now.
        let _ = serde_json::to_writer(&mut list, &entry.to_wire());
    }
    list.push(b']');
    (list, entries.len() - fitting)
}

/// `list` as a body's stream of [`CHUNK`]s that holds `place` until its last chunk was taken
/// or it is dropped (the connection cut).
fn chunks_holding(
    list: Bytes,
    place: OwnedSemaphorePermit,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    futures_util::stream::unfold((list, Some(place)), |(mut rest, place)| async move {
        if rest.is_empty() {
            return None;
        }
        let chunk = rest.split_to(rest.len().min(CHUNK));
        Some((Ok(chunk), (rest, place)))
    })
}

/// The answers that pass the filters as they come, as server-sent events: `event: answer`
/// with the answer's JSON; `event: lagged` with how many were missed when the follower fell
/// behind (the stream goes on); `event: stopping` when the resolver stops. A comment every
/// 15 s when nothing else was sent.
#[utoipa::path(
    get,
    path = "/query-log/stream",
    tag = "query log",
    params(LogQuery),
    responses(
        (status = 200, description = "An endless stream of answers.", body = String, content_type = "text/event-stream"),
        (status = 400, description = "A filter that does not parse, named.", body = String, content_type = "text/plain"),
        (status = 503, description = "Too many followers (at most 16 at once).", body = String, content_type = "text/plain"),
    ),
)]
pub(super) async fn query_log_stream(
    State(state): State<ApiState>,
    Query(query): Query<LogQuery>,
) -> Result<Response, ApiError> {
    let filter = query.filter()?;
    if state.query_log.followers() >= MAX_FOLLOWERS {
        return Err(ApiError::Unavailable(format!(
            "too many followers of the query log (at most {MAX_FOLLOWERS})"
        )));
    }
    let receiver = state.query_log.follow();
    let messages = answers(receiver, filter, state);
    Ok(Sse::new(messages)
        .keep_alive(KeepAlive::new().interval(super::events::KEEP_ALIVE))
        .into_response())
}

/// The follower's answers as SSE messages, until the resolver stops.
fn answers(
    receiver: tokio::sync::broadcast::Receiver<std::sync::Arc<crate::query_log::Entry>>,
    filter: Filter,
    state: ApiState,
) -> impl Stream<Item = Result<sse::Event, Infallible>> {
    futures_util::stream::unfold(Some(receiver), move |receiver| {
        let (filter, state) = (filter.clone(), state.clone());
        async move {
            let mut receiver = receiver?;
            loop {
                tokio::select! {
                    () = state.stop.cancelled() => {
                        let last = sse::Event::default().event("stopping").data("{}");
                        return Some((Ok(last), None));
                    }
                    next = receiver.recv() => match next {
                        Ok(entry) if filter.matches(&entry) => {
                            let data = serde_json::to_string(&entry.to_wire()).unwrap_or_default();
                            let message = sse::Event::default().event("answer").data(data);
                            return Some((Ok(message), Some(receiver)));
                        }
                        Ok(_) => {}
                        Err(RecvError::Lagged(n)) => {
                            state.query_log.count_lagged(n);
                            let notice = sse::Event::default()
                                .event("lagged")
                                .data(format!("{{\"missed\":{n}}}"));
                            return Some((Ok(notice), Some(receiver)));
                        }
                        Err(RecvError::Closed) => return None,
                    }
                }
            }
        }
    })
}

/// The query log's state: its ring, what it received, what the workers sent that it missed.
#[utoipa::path(
    get,
    path = "/query-log/status",
    tag = "query log",
    responses((status = 200, description = "The query log's state.", body = QueryLogStatus)),
)]
pub(super) async fn query_log_status(State(state): State<ApiState>) -> Response {
    let rundir = state.manager.config().model.rundir.clone();
    let mut dropped = BTreeMap::new();
    if state.query_log.enabled() {
        for w in crate::service::running_workers(&state.supervisor.snapshot()) {
            if let Some(n) = crate::query_log::records::dropped(&rundir, w).await {
                dropped.insert(w.0, n);
            }
        }
    }
    json_value(StatusCode::OK, &state.query_log.status(&dropped))
}

/// The window and length of a top list.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TopQuery {
    /// Only answers sent within this long (`30s`, `5m`, `1h`, or seconds); default: the
    /// whole ring.
    window: Option<String>,
    /// At most this many keys (default 10, at most 10,000).
    limit: Option<usize>,
}

impl PathValue for TopKind {
    fn refused(text: &str) -> ApiError {
        ApiError::BadRequest(select::SelectError::Kind(text.to_owned()).to_string())
    }
}

/// The most frequent keys among the answers of the ring within the window: clients, names,
/// names answered SERVFAIL, NXDOMAIN or failing DNSSEC validation (bogus), types. Counts are
/// exact within the ring.
#[utoipa::path(
    get,
    path = "/top/{kind}",
    tag = "query log",
    params(("kind" = inline(TopKind), Path, description = "Which list."), TopQuery),
    responses(
        (status = 200, description = "The list.", body = TopList),
        (status = 400, description = "An unknown list or a window that does not parse.", body = String, content_type = "text/plain"),
    ),
)]
pub(super) async fn top_list(
    State(state): State<ApiState>,
    PathParam(kind): PathParam<TopKind>,
    Query(query): Query<TopQuery>,
) -> Result<Response, ApiError> {
    let window = query
        .window
        .as_deref()
        .map(parse_window)
        .transpose()
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let since_us = window.map(|w| {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        now.saturating_sub(w).as_micros() as u64
    });
    let limit = query.limit.unwrap_or(10).min(10_000);
    let entries = state.query_log.entries();
    let list = crate::manager::off_thread(move || {
        select::top(
            entries.iter(),
            kind,
            since_us,
            window.map(|w| w.as_secs_f64()),
            limit,
        )
    })
    .await;
    Ok(json_value(StatusCode::OK, &list))
}

/// A `window` that is not a duration.
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("window: '{0}' is not a duration (30s, 5m, 1h, or seconds)")]
pub struct BadWindow(String);

/// `30s`, `5m`, `1h`, `1d`, `500ms` or plain seconds: up to 9 digits, up to 6 decimals
/// ([`WINDOW_PATTERN`]).
pub fn parse_window(text: &str) -> Result<Duration, BadWindow> {
    let bad = || BadWindow(text.to_owned());
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, "0"));
    if !(1..=9).contains(&whole.len())
        || !(1..=6).contains(&fraction.len())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    let number: f64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "" | "s" => number,
        "ms" => number / 1000.0,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        "d" => number * 86_400.0,
        _ => return Err(bad()),
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| bad())
}

/// The windows [`parse_window`] takes, for the API's document.
pub const WINDOW_PATTERN: &str = r"^[0-9]{1,9}(\.[0-9]{1,6})?(ms|s|m|h|d)?$";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows() {
        assert_eq!(parse_window("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_window("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_window("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_window("250ms"), Ok(Duration::from_millis(250)));
        for bad in [
            "",
            "m",
            "5x",
            "-1s",
            "1e400",
            " 5",
            "1234567890",
            "1.",
            ".5",
            "1.2.3",
        ] {
            assert!(parse_window(bad).is_err(), "{bad}");
        }
    }
}
