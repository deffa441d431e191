//! `kresctl events` and `kresctl processes --watch`: follow the resolver's event stream
//! (`GET /events`, server-sent events) and print it as it comes, so an operator sees crashes,
//! restarts and configuration changes without polling. Against a resolver without the route
//! (upstream's manager answers 404) they say so and fail.

use std::time::Duration;

use http_body_util::BodyExt;

use super::processes::print_processes;
use crate::client::{ApiClient, ClientError};
use crate::output::{self, OutputFormat, WriteError};
use crate::request::Request;
use kres_wire::events::{Event, Record};

/// A stream that sends nothing, not even the keep-alive comment the API sends every 15 s,
/// for this long is taken for dead.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// After a table could not be read, how long `processes --watch` waits for the stream to end
/// (the resolver stops) before it reports the failure.
const STOPPING_GRACE: Duration = Duration::from_secs(5);

/// How long the answer's head may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest line, and the longest message, read from the stream.
const MAX_LINE: usize = 1 << 20;

/// One server-sent message: what its `id:`, `event:` and `data:` lines said.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Message {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

/// Server-sent events from bytes, as they arrive (the text/event-stream format: fields per
/// line, a blank line ends a message, lines starting with `:` are comments).
#[derive(Default)]
struct Parser {
    /// Bytes after the last complete line.
    partial: Vec<u8>,
    /// The message being read.
    message: Message,
    /// Whether the message has a field yet (a blank line after comments is no message).
    started: bool,
    /// Complete messages not yet taken.
    ready: std::collections::VecDeque<Message>,
}

impl Parser {
    fn push(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            self.partial.extend_from_slice(&rest[..end]);
            rest = &rest[end + 1..];
            let mut line = std::mem::take(&mut self.partial);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            self.line(&String::from_utf8_lossy(&line))?;
        }
        self.partial.extend_from_slice(rest);
        if self.partial.len() > MAX_LINE {
            return Err(ClientError::EventStream(format!(
                "a line longer than {MAX_LINE} bytes"
            )));
        }
        Ok(())
    }

    fn line(&mut self, line: &str) -> Result<(), ClientError> {
        if line.is_empty() {
            if std::mem::take(&mut self.started) {
                self.ready.push_back(std::mem::take(&mut self.message));
            }
            return Ok(());
        }
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        self.started = true;
        match field {
            "id" => self.message.id = Some(value.to_owned()),
            "event" => self.message.event = Some(value.to_owned()),
            "data" => {
                if !self.message.data.is_empty() {
                    self.message.data.push('\n');
                }
                self.message.data.push_str(value);
                if self.message.data.len() > MAX_LINE {
                    return Err(ClientError::EventStream(format!(
                        "a message longer than {MAX_LINE} bytes"
                    )));
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// An open `GET /events`.
pub struct EventStream {
    body: hyper::body::Incoming,
    parser: Parser,
}

impl EventStream {
    /// Follow the events after `last` (an id seen before), or from now on.
    pub async fn open(client: &ApiClient, last: Option<&str>) -> Result<EventStream, ClientError> {
        let request = Request::Events {
            last_event_id: last,
        };
        EventStream::open_request(client, &request).await
    }

    /// Open any route that answers with server-sent events.
    pub async fn open_request(
        client: &ApiClient,
        request: &Request<'_>,
    ) -> Result<EventStream, ClientError> {
        let response = tokio::time::timeout(OPEN_TIMEOUT, client.open(request))
            .await
            .map_err(|_| ClientError::Timeout(OPEN_TIMEOUT))??;
        let status = response.status().as_u16();
        let is_stream = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        match status {
            200 if is_stream => Ok(EventStream {
                body: response.into_body(),
                parser: Parser::default(),
            }),
            200 => Err(ClientError::EventStream(format!(
                "the answer to {} is not an event stream",
                request.path()
            ))),
            404 if matches!(request, Request::Events { .. }) => Err(ClientError::NoEvents),
            _ => {
                let limited = http_body_util::Limited::new(response.into_body(), MAX_LINE);
                let body = match tokio::time::timeout(OPEN_TIMEOUT, limited.collect()).await {
                    Ok(Ok(collected)) => {
                        String::from_utf8_lossy(&collected.to_bytes()).into_owned()
                    }
                    _ => String::new(),
                };
                Err(ClientError::from_status(status, body))
            }
        }
    }

    /// The next message; `None` when the resolver ended the stream.
    pub async fn next(&mut self) -> Result<Option<Message>, ClientError> {
        loop {
            if let Some(message) = self.parser.ready.pop_front() {
                return Ok(Some(message));
            }
            let frame = tokio::time::timeout(IDLE_TIMEOUT, self.body.frame())
                .await
                .map_err(|_| {
                    ClientError::EventStream(format!(
                        "nothing came for {} s, not even a keep-alive",
                        IDLE_TIMEOUT.as_secs()
                    ))
                })?;
            match frame {
                None => return Ok(None),
                Some(Err(e)) => return Err(ClientError::EventStream(e.to_string())),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.parser.push(&data)?;
                    }
                }
            }
        }
    }
}

/// The one place an event's data is read: the record it carries, if it is one this kresctl
/// knows.
fn record(message: &Message) -> Option<Record> {
    serde_json::from_str::<Record>(&message.data).ok()
}

/// How many times in a row a broken stream is reopened before kresctl gives up.
const REOPEN_ATTEMPTS: u32 = 8;

/// The wait before the second attempt to reopen a broken stream (the first is at once),
/// doubled after each failure up to [`REOPEN_BACKOFF_MAX`].
const REOPEN_BACKOFF_FIRST: Duration = Duration::from_millis(100);

/// The longest wait between two attempts to reopen a broken stream.
const REOPEN_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// What a [`Follower`] gives.
#[derive(Debug)]
enum Followed {
    /// A message of the stream.
    Message(Message),
    /// The stream broke off (the manager process was replaced) and was opened again, from
    /// the last id seen: what follows comes from the new stream.
    Resumed,
}

/// Whether the stream said it ends because the resolver stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// Nothing said: a stream that ends now broke off, and is reopened.
    Unannounced,
    /// A `stopping` notice came: the end that follows is the resolver's.
    Announced,
}

/// `GET /events` followed across the replacement of the manager process: a stream that
/// breaks off, or ends without a `stopping` notice, is opened again with `Last-Event-ID`
/// (the last id seen), quietly, [`REOPEN_ATTEMPTS`] times at most with a growing wait, so
/// a follower misses nothing the log still holds (and is told by `events-missed` what it
/// no longer does).
struct Follower<'a> {
    /// Where the stream is reopened.
    client: &'a ApiClient,
    /// The stream being read.
    stream: EventStream,
    /// The id of the last message that had one: where a reopened stream resumes.
    last_seen: Option<String>,
    /// Whether the resolver announced its stop.
    ending: Ending,
    /// Attempts to reopen since the last message: the bound holds across streams that
    /// open and break again at once.
    reopen_attempts: u32,
}

impl<'a> Follower<'a> {
    async fn open(client: &'a ApiClient, last: Option<&str>) -> Result<Follower<'a>, ClientError> {
        Ok(Follower {
            client,
            stream: EventStream::open(client, last).await?,
            last_seen: last.map(str::to_owned),
            ending: Ending::Unannounced,
            reopen_attempts: 0,
        })
    }

    /// The next message, or word that the stream was reopened; `None` once the resolver
    /// ended the stream because it stops.
    async fn next(&mut self) -> Result<Option<Followed>, ClientError> {
        let broken = match self.stream.next().await {
            Ok(Some(message)) => {
                self.reopen_attempts = 0;
                if message.id.is_some() {
                    self.last_seen.clone_from(&message.id);
                }
                if message.event.as_deref() == Some("stopping") {
                    self.ending = Ending::Announced;
                }
                return Ok(Some(Followed::Message(message)));
            }
            Ok(None) if self.ending == Ending::Announced => return Ok(None),
            Ok(None) => ClientError::EventStream("the stream ended unannounced".into()),
            Err(e @ ClientError::EventStream(_)) => e,
            Err(e) => return Err(e),
        };
        self.reopen(broken).await?;
        Ok(Some(Followed::Resumed))
    }

    /// Open the stream again after it broke off with `broken`.
    async fn reopen(&mut self, broken: ClientError) -> Result<(), ClientError> {
        let mut wait = Duration::ZERO;
        let mut last_error = None;
        while self.reopen_attempts < REOPEN_ATTEMPTS {
            self.reopen_attempts += 1;
            tokio::time::sleep(wait).await;
            match EventStream::open(self.client, self.last_seen.as_deref()).await {
                Ok(stream) => {
                    self.stream = stream;
                    return Ok(());
                }
                Err(e) => last_error = Some(e),
            }
            wait = (wait * 2).clamp(REOPEN_BACKOFF_FIRST, REOPEN_BACKOFF_MAX);
        }
        let reason = last_error.map_or_else(String::new, |e| format!(": {e}"));
        Err(ClientError::EventStream(format!(
            "{broken}; reopened in vain {REOPEN_ATTEMPTS} times{reason}"
        )))
    }
}

/// Run `follow` until it ends, or until standard output's reader is gone (then quietly).
async fn until_output_closed(
    follow: impl std::future::Future<Output = Result<(), ClientError>>,
) -> Result<(), ClientError> {
    tokio::select! {
        ended = follow => ended,
        () = output::closed() => Err(WriteError::Closed.into()),
    }
}

/// `kresctl events`: one line per event (its JSON in [`OutputFormat::Json`]), until the
/// resolver ends the stream (exit 0) or cuts this follower for falling behind (exit 1).
/// A stream broken by the manager process's replacement is resumed.
pub async fn follow(
    client: &ApiClient,
    format: OutputFormat,
    last: Option<&str>,
) -> Result<(), ClientError> {
    until_output_closed(async {
        let mut follower = Follower::open(client, last).await?;
        while let Some(followed) = follower.next().await? {
            let Followed::Message(message) = followed else {
                continue;
            };
            let record = record(&message);
            match format {
                OutputFormat::Json => output::println(&message.data)?,
                OutputFormat::Yaml | OutputFormat::Text => {
                    output::println(&human(&message, record.as_ref()))?;
                }
            }
            if let Some(Event::EventsLagged { .. }) = record.as_ref().map(|r| &r.event) {
                return Err(lagged(follower.last_seen.as_deref()));
            }
        }
        eprintln!("the resolver ended the event stream");
        Ok(())
    })
    .await
}

/// `kresctl processes --watch`: the table, then again after every process event (in
/// [`OutputFormat::Json`]: the event's JSON object, then the table's) and after the stream
/// was resumed.
pub async fn watch_processes(client: &ApiClient, format: OutputFormat) -> Result<(), ClientError> {
    until_output_closed(async {
        // Following first: nothing that happens after the first table is missed.
        let mut follower = Follower::open(client, None).await?;
        print_processes(client, format).await?;
        while let Some(followed) = follower.next().await? {
            match followed {
                Followed::Resumed => {}
                Followed::Message(message) => {
                    let Some(record) = record(&message) else {
                        continue;
                    };
                    if let Event::EventsLagged { .. } = record.event {
                        return Err(lagged(follower.last_seen.as_deref()));
                    }
                    if !record.event.is_process() {
                        continue;
                    }
                    match format {
                        OutputFormat::Json => output::println(&message.data)?,
                        OutputFormat::Yaml | OutputFormat::Text => {
                            output::println(&format!("\n{}", human(&message, Some(&record))))?;
                        }
                    }
                }
            }
            if let Err(e) = print_processes(client, format).await {
                // A resolver that stops answers no more requests, and its stream ends: that
                // is the end of watching, not a failure.
                if ends_soon(&mut follower.stream).await {
                    break;
                }
                return Err(e);
            }
        }
        eprintln!("the resolver ended the event stream");
        Ok(())
    })
    .await
}

/// Whether `stream` ends within [`STOPPING_GRACE`], a `stopping` notice at most before.
async fn ends_soon(stream: &mut EventStream) -> bool {
    let end = async {
        loop {
            match stream.next().await {
                Ok(None) => return true,
                Ok(Some(message)) if message.event.as_deref() == Some("stopping") => {}
                _ => return false,
            }
        }
    };
    tokio::time::timeout(STOPPING_GRACE, end)
        .await
        .unwrap_or(false)
}

fn lagged(last: Option<&str>) -> ClientError {
    ClientError::EventStream(match last {
        Some(id) => {
            format!("this client fell behind and was cut; resume with --last-event-id {id}")
        }
        None => "this client fell behind and was cut".into(),
    })
}

/// One line for an operator: time (UTC), id, and the event; a kind this kresctl does not
/// know is printed with its data as it came.
fn human(message: &Message, record: Option<&Record>) -> String {
    let id = message.id.as_deref().unwrap_or("-");
    match record {
        Some(r) => format!("{} {id} {}", utc(r.time), r.event),
        None => format!(
            "{id} {} {}",
            message.event.as_deref().unwrap_or("message"),
            message.data
        ),
    }
}

/// Unix seconds as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn utc(seconds: f64) -> String {
    let millis = (seconds.max(0.0) * 1000.0) as i64;
    let (days, ms) = (millis.div_euclid(86_400_000), millis.rem_euclid(86_400_000));
    // Days to a civil date (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_read_across_any_split_of_the_bytes() {
        let text = ": keep-alive\n\nevent: process-ready\ndata: {\"a\":1}\nid: 1.f-3\n\n:c\r\nid: 1.f-4\r\ndata: x\r\ndata: y\r\n\r\n";
        let want = vec![
            Message {
                id: Some("1.f-3".into()),
                event: Some("process-ready".into()),
                data: "{\"a\":1}".into(),
            },
            Message {
                id: Some("1.f-4".into()),
                event: None,
                data: "x\ny".into(),
            },
        ];
        for split in 0..text.len() {
            let mut parser = Parser::default();
            parser.push(&text.as_bytes()[..split]).expect("push");
            parser.push(&text.as_bytes()[split..]).expect("push");
            let got: Vec<Message> = parser.ready.drain(..).collect();
            assert_eq!(got, want, "split at {split}");
        }
    }

    #[test]
    fn an_endless_line_is_refused() {
        let mut parser = Parser::default();
        let chunk = vec![b'x'; 64 << 10];
        let refused = (0..32).any(|_| parser.push(&chunk).is_err());
        assert!(refused);
    }

    #[test]
    fn times_are_utc() {
        assert_eq!(utc(0.0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(951_782_400.5), "2000-02-29T00:00:00.500Z");
        assert_eq!(utc(1_795_448_265.25), "2026-11-23T15:37:45.250Z");
    }
}
