//! `GET /events`: the event log (`crate::events`) as server-sent events, for operators and
//! tools that follow what the resolver does (`kresctl events`, `kresctl processes --watch`).
//!
//! Every event is an SSE message with `id:` (to resume from), `event:` (its kind) and one JSON
//! `data:` line. A client resumes with the `Last-Event-ID` header (or `?last-event-id=`). The
//! stream is not bounded by the per-request time limit (that bounds the answer's head only),
//! carries a keep-alive comment every [`KEEP_ALIVE`], and ends when the resolver stops, so the
//! server's graceful shutdown never waits for a follower.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::response::sse::{self, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use futures_util::stream::Stream;
use tokio_util::sync::CancellationToken;

use super::error::ApiError;
use super::roles::Role;
use super::ApiState;
use crate::events::{Event, Follower, FollowerClass, Record};

/// A comment line is sent when nothing else was for this long: proxies and clients see the
/// stream is alive, and a client gone away is noticed by the next write.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The query alternative to the `Last-Event-ID` header.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// As the `Last-Event-ID` header, for clients that cannot set headers; the header wins.
    #[serde(rename = "last-event-id")]
    #[param(rename = "last-event-id")]
    last_event_id: Option<String>,
}

/// `Last-Event-ID`.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
pub struct LastEventId {
    /// Resume after this event: the `id:` of the last event the client got. Events after it
    /// that the log still keeps come first; when some are gone, an `events-missed` notice
    /// precedes them. An id of another manager process (or none) starts from now.
    #[param(rename = "Last-Event-ID")]
    last_event_id: Option<String>,
}

impl<S: Send + Sync> FromRequestParts<S> for LastEventId {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Infallible> {
        let last_event_id = parts
            .headers
            .get("last-event-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        Ok(LastEventId { last_event_id })
    }
}

/// Follow what the resolver does, as server-sent events.
///
/// Every event is an SSE message with `id:` (`<epoch>-<seq>`, to resume from), `event:` (its
/// kind: `process-spawned`, `process-ready`, `process-exited`, `process-restarted`,
/// `process-hung`, `process-failed`, `process-removed`, `manager-started`, `draining`,
/// `policy-loader-finished`, `config-reloading`, `config-renewing`, `config-changing`,
/// `config-applied`, `config-refused`, `config-rolled-back`; for RPZ zones kept by zone
/// transfer `rpz-followed`, `rpz-notified`, `rpz-transferred`, `rpz-transfer-failed`,
/// `rpz-expired`, `rpz-notify-listen-failed`, `rpz-zone-broken`, `rpz-zone-loaded`) and one
/// JSON `data:` line. Notices without
/// `id:`: `events-missed`, `events-lagged` (the client fell behind
/// and the stream ends), `stopping` (the resolver stops and the stream ends). A comment line is
/// sent every 15 s when nothing else was.
#[utoipa::path(
    get,
    path = "/events",
    tag = "status",
    params(LastEventId, EventsQuery),
    responses(
        (status = 200, description = "An endless stream of events.", body = String,
         content_type = "text/event-stream"),
        (status = 503, description = "Too many followers (at most 32 at once, of which 8 only \
         for admins).", body = String,
         content_type = "text/plain"),
    ),
)]
pub async fn follow(
    State(state): State<ApiState>,
    role: Option<Extension<Role>>,
    header: LastEventId,
    Query(query): Query<EventsQuery>,
) -> Result<Response, ApiError> {
    // Admins may take the places kept in reserve: readers cannot hold every stream. A request
    // the guard did not see (none is served so) counts as a reader's.
    let class = match role {
        Some(Extension(Role::Admin)) => FollowerClass::Privileged,
        Some(Extension(Role::ReadOnly)) | None => FollowerClass::Ordinary,
    };
    let last = header.last_event_id.or(query.last_event_id);
    let follower = state
        .events
        .follow(last.as_deref(), class)
        .map_err(|e| ApiError::Unavailable(e.to_string()))?;
    let stream = messages(follower, state.stop.clone());
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}

/// The follower's events as SSE messages, until it is cut, or `stop` fires (then a last
/// `stopping` notice says why the stream ends).
fn messages(
    follower: Follower,
    stop: CancellationToken,
) -> impl Stream<Item = Result<sse::Event, Infallible>> {
    futures_util::stream::unfold(Some((follower, stop)), |state| async move {
        let (mut follower, stop) = state?;
        tokio::select! {
            () = stop.cancelled() => {
                let notice = Record::notice(Event::Stopping);
                Some((Ok(message(&notice)), None))
            }
            record = follower.next() => {
                let record = record?;
                Some((Ok(message(&record)), Some((follower, stop))))
            }
        }
    })
}

/// One record as an SSE message: `id:` when it has one, `event:` its kind, `data:` its JSON.
fn message(record: &Record) -> sse::Event {
    let data = serde_json::to_string(record).unwrap_or_else(|_| "{}".to_owned());
    let message = sse::Event::default().event(record.event.kind()).data(data);
    match &record.id {
        Some(id) => message.id(id.to_string()),
        None => message,
    }
}
